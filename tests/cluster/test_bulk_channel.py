"""The bulk channel between two servers' Vans (core/bulk_channel.py): chunks sealed with
AEGIS-256 on a plain port, and every way a foreign or confused peer is refused there."""
import logging
import os
import struct
import time

import numpy as np
import pytest
import zmq

from netstorm.geoserver.config.keys import generate_cluster_keys
from netstorm.geoserver.core import bulk_channel, wire
from netstorm.geoserver.core.security import credentials_for
from netstorm.geoserver.core.van import Van
from netstorm.geoserver.core.wire import Kind, Message

dataplane = pytest.importorskip("netstorm.geoserver._dataplane")
if bulk_channel.unavailable():
    pytest.skip(f"no bulk channel here: {bulk_channel.unavailable()}", allow_module_level=True)

A, B = "dc0", "dc1"          # DC indices 0 and 1; their servers are nodes 1 and 2
NODE = {A: 1, B: 2}


@pytest.fixture
def vans(tmp_path):
    security = generate_cluster_keys([A, B, "dc2"], tmp_path / "keys")
    made = {dc: Van(f"server {dc}", "127.0.0.1", credentials=credentials_for(security, dc),
                    bulk=True) for dc in (A, B)}
    for dc, van in made.items():
        van.node_id = NODE[dc]
        van.zap.allow_bulk({"127.0.0.1"})
    yield made, security
    for van in made.values():
        van.close()


def link(vans, src=A, dst=B, key=None, epoch=1):
    """Install a key for src -> dst as LINK_KEY/LINK_KEY_DONE would: the opener at dst,
    the sealer and bulk DEALER at src."""
    key = key or os.urandom(32)
    index = {A: 0, B: 1}
    vans[dst].bulk.expect(src, index[src], NODE[src],
                          dataplane.BulkOpener(key, index[src], index[dst], epoch))
    vans[src].bulk_connect(NODE[dst], vans[dst].bulk.address, b"", dataplane.BulkSealer(key, index[src], index[dst], epoch),
        vans[dst].bulk.max_frame, 0)
    return key


def chunk(key=7, n=1000, kind=Kind.CHUNK_UP, meta=None):
    return Message(kind, key=key, chunk=0, seq=3, policy=1, tree=0,
                   dtype=np.dtype(np.float32), frames=[np.arange(n, dtype=np.float32)],
                   meta=meta or {})


def recv_all(van, timeout_s=1.0):
    got, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = van.recv(0.1)
        if msg is not None:
            got.append(msg)
    return got


def raw_dealer(van_to, rid=None):
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDTIMEO, 10_000)   # a send with no pipe fails the test, not hangs
    if rid is not None:
        sock.setsockopt(zmq.ROUTING_ID, rid)
    sock.connect(van_to.bulk.address)
    return sock


def test_chunks_go_sealed_on_the_bulk_port_and_arrive_as_from_that_dc(vans):
    vans, _ = vans
    vans[A].connect(NODE[B], vans[B].address, principal=B)
    link(vans)
    vans[A].send(NODE[B], chunk())
    vans[A].send(NODE[B], chunk(key=8, meta={"part": [0, 2000], "from": A}))   # meta: CURVE
    got = recv_all(vans[B])
    assert sorted(m.key for m in got) == [7, 8]
    for msg in got:
        assert msg.origin == A and msg.sender == NODE[A]
        assert np.array_equal(msg.arrays()[0], np.arange(1000, dtype=np.float32))
    assert vans[B].bulk.refused == 0
    assert vans[B].bulk._links[A][1].last_counter == 1


def test_a_stranger_on_the_bulk_port_is_refused_by_zap(vans, caplog):
    vans, _ = vans
    link(vans)
    vans[B].zap.allow_bulk({"10.9.9.9"})        # 127.0.0.1 is no server of this cluster
    caplog.set_level(logging.INFO)
    stranger = raw_dealer(vans[B], bulk_channel.routing_id(0))
    try:        # ZAP may refuse the handshake before the send: the DEALER has no pipe then
        stranger.send(b"x" * 100, zmq.NOBLOCK)      # (a blocking send hung the suite)
    except zmq.Again:
        pass
    assert recv_all(vans[B], 0.5) == []
    assert vans[B].zap.refused >= 1
    assert "not a server of the cluster (bulk port)" in caplog.text
    stranger.close(0)


def _captured_frame(vans, msg):
    """What A's bulk DEALER would put on the wire for ``msg`` (sealed with A's key)."""
    _sock, sealer, _max = vans[A]._bulk_out[NODE[B]]
    header, _meta, payload = wire.encode(msg)
    msg.sender = NODE[A]
    header, _meta, payload = wire.encode(msg)
    return sealer.seal(header, payload)


@pytest.mark.parametrize("attack", ["no key", "wrong key", "replay", "tampered header",
                                    "oversize", "other link", "wrong sender",
                                    "not a chunk"])
def test_forged_bulk_frames_are_refused_logged_and_nothing_is_applied(vans, caplog, attack):
    vans, security = vans
    caplog.set_level(logging.INFO)
    vans[A].connect(NODE[B], vans[B].address, principal=B)
    key = link(vans)
    vans[A].send(NODE[B], chunk(key=1))
    assert [m.key for m in recv_all(vans[B], 0.5)] == [1]
    frames = []
    rid = bulk_channel.routing_id(0)
    if attack == "no key":
        frames = [struct.pack("<Q", 2) + os.urandom(1000)]      # sealed under no key
    elif attack == "wrong key":
        sealer = dataplane.BulkSealer(os.urandom(32), 0, 1, 1)
        frames = [sealer.seal(*_plain(chunk(key=2)))]
        rid = b"nsbulk-other"                             # not A's connection id
        vans[B].bulk.expect(A, 0, NODE[A], dataplane.BulkOpener(key, 0, 1, 1))
        rid = bulk_channel.routing_id(0) + b"x"           # unknown: no key, also refused
    elif attack == "replay":
        frame = _captured_frame(vans, chunk(key=2))       # counter 2: accepted once ...
        frames = [frame, frame]
    elif attack == "tampered header":
        frame = bytearray(_captured_frame(vans, chunk(key=2)))
        frame[8 + 12] ^= 1                                # the key field, encrypted
        frames = [bytes(frame)]
    elif attack == "oversize":
        frames = [bytes(vans[B].bulk.max_frame + 1)]
    elif attack == "other link":                          # sealed for dc1 -> dc0 (same key)
        frames = [dataplane.BulkSealer(key, 1, 0, 1).seal(*_plain(chunk(key=2)))]
    elif attack == "wrong sender":                        # A's key, header naming node 9
        sealer = vans[A]._bulk_out[NODE[B]][1]
        msg = chunk(key=2)
        msg.sender = 9
        frames = [sealer.seal(*_plain(msg))]
    else:                                                 # A's key, a control kind
        sealer = vans[A]._bulk_out[NODE[B]][1]
        msg = Message(Kind.SHUTDOWN)
        msg.sender = NODE[A]
        header, _meta, *_ = wire.encode(msg)
        frames = [sealer.seal(header)]
    if attack == "wrong key":
        frames = [dataplane.BulkSealer(os.urandom(32), 0, 1, 1).seal(*_plain(chunk(key=2)))]
        rid = None                                        # on A's own connection id below
    sock = None
    if rid is not None:
        sock = raw_dealer(vans[B], rid)
        for frame in frames:
            sock.send(frame)
    else:
        own = vans[A]._bulk_out[NODE[B]][0]
        for frame in frames:
            own.send(frame)
    got = recv_all(vans[B], 0.7)
    if attack == "replay":
        assert [m.key for m in got] == [2]                # once, then refused
    else:
        assert got == []
    if attack != "oversize":                              # ZeroMQ drops that connection
        assert vans[B].bulk.refused >= 1
        assert "dropped a bulk frame" in caplog.text
    # the real link still works afterwards
    vans[A].send(NODE[B], chunk(key=3))
    assert [m.key for m in recv_all(vans[B], 0.7)] == [3]
    if sock is not None:
        sock.close(0)


def _plain(msg):
    msg.sender = msg.sender if msg.sender != wire.NO_NODE else NODE[A]
    header, _meta, payload = wire.encode(msg)
    return header, payload
