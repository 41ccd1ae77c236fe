"""Postoffice.register against a scheduler played by the test (loopback sockets): messages
that beat the WELCOME are kept (if the table then admits them), and the WELCOME's settings
are validated on arrival."""

import threading
import time
import numpy as np
import pytest
from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
from netstorm.geoserver.core.postoffice import Postoffice
from netstorm.geoserver.config.settings import RuntimeSettings
from netstorm.geoserver.core.van import Van


@pytest.fixture
def node():
    """``(postoffice, scheduler van, peer van)``: a server of dc0 not yet registered; the
    peer is dc1's server (node 2 of the table :func:`register` sends)."""
    sched, node_van, peer = (Van(name, "127.0.0.1", 0) for name in ("sched", "node", "peer"))
    peer.connect("n", node_van.address)
    peer.node_id = 2
    yield Postoffice(node_van, sched.address, "server", "dc0"), sched, peer
    for van in (peer, sched, node_van):
        van.close()


def register(po: Postoffice, sched: Van, **welcome):
    """``po.register`` while the test's scheduler answers with a WELCOME: the node table
    (the scheduler and this server), then ``welcome`` over it."""
    table = [{"id": 0, "role": "scheduler", "dc": "", "address": sched.address,
              "rank": -1, "local_rank": -1},
             {"id": 1, "role": "server", "dc": "dc0", "address": po.van.address,
              "rank": -1, "local_rank": -1},
             {"id": 2, "role": "server", "dc": "dc1", "address": "tcp://127.0.0.1:1",
              "rank": -1, "local_rank": -1}]

    def answer():
        reg = sched.recv(10)
        assert reg.kind == wire.Kind.REGISTER
        time.sleep(0.3)
        sched.connect("n", po.van.address)
        sched.send("n", wire.Message(wire.Kind.WELCOME, meta={
            "nodes": table, "you": 1, "settings": RuntimeSettings().to_json(), **welcome}))
    scheduler = threading.Thread(target=answer)
    scheduler.start()
    try:
        return po.register(10)
    finally:
        scheduler.join()


class _StubVan:
    address = "tcp://127.0.0.1:1"
    local_address = ""

    def connect(self, peer, address, send_hwm=0, principal="", watch=False):
        pass


def test_messages_before_the_welcome_are_bounded_in_number_and_bytes(monkeypatch, caplog):
    from netstorm.geoserver.core import postoffice
    monkeypatch.setattr(postoffice, "MAX_EARLY_MESSAGES", 3)
    monkeypatch.setattr(postoffice, "MAX_HELD_BYTES_PER_PEER", 100)
    po = Postoffice(_StubVan(), "tcp://127.0.0.1:2", "server", "dc0")
    chunk = wire.Message(wire.Kind.CHUNK_UP, sender=2, dtype=np.uint8,
                         frames=[np.zeros(60, np.uint8)])
    po._keep_early(chunk)
    po._keep_early(chunk)                                  # 120 bytes: over the bound
    for _ in range(3):
        po._keep_early(wire.Message(wire.Kind.HEARTBEAT, sender=2))
    assert [m.kind for m in po.early] == [wire.Kind.CHUNK_UP, wire.Kind.HEARTBEAT,
                                          wire.Kind.HEARTBEAT]
    assert "dropped CHUNK_UP from node 2 that came before the WELCOME" in caplog.text
    po.early = [m for m in po.early if m.kind == wire.Kind.CHUNK_UP]
    po.table = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:2"),
                          NodeInfo(1, "server", "dc0", "tcp://127.0.0.1:1"),
                          NodeInfo(2, "server", "dc1", "tcp://127.0.0.1:3")])
    po.me = po.table[1]
    assert len(po.take_early()) == 1 and po._early_bytes == 0


def test_only_nodes_of_this_dc_on_this_host_are_reached_over_ipc():
    import socket
    po = Postoffice(_StubVan(), "tcp://127.0.0.1:2", "worker", "dc0")
    po.van.local_address = "ipc:///tmp/netstorm-me/node.sock"
    here = socket.gethostname()

    def node(dc, host, local="ipc:///tmp/netstorm-x/node.sock"):
        return NodeInfo(1, "server", dc, "tcp://127.0.0.1:9", host=host, local_address=local)
    assert po.address_of(node("dc0", here)) == "ipc:///tmp/netstorm-x/node.sock"
    assert po.address_of(node("dc1", here)) == "tcp://127.0.0.1:9"    # another DC: the WAN
    assert po.address_of(node("dc0", here + "-other")) == "tcp://127.0.0.1:9"
    assert po.address_of(node("dc0", here, local="")) == "tcp://127.0.0.1:9"
    po.van.local_address = ""                                        # this node has none
    assert po.address_of(node("dc0", here)) == "tcp://127.0.0.1:9"
