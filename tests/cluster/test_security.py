"""security: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_security.py."""

import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path
import numpy as np
import pytest
import zmq
from zmq.utils import garbage
from netstorm.geoserver.core import security, wire
from netstorm.geoserver.core.security import credentials_for
from netstorm.geoserver.config.keys import KeyPair, generate_cluster_keys
from netstorm.geoserver.core.van import TransportError, Van


@pytest.fixture
def keys(tmp_path):
    return generate_cluster_keys(["eu", "us"], tmp_path / "keys")


def _message(sender=1):
    return wire.Message(wire.Kind.PROBE, sender=sender, dtype=np.float32,
                        frames=[np.ones(3, np.float32)])


def _send_unless_refused(sock) -> None:
    """Send a message on a DEALER whose handshake the server refuses: without blocking, as
    the refusal may come first and leave the DEALER no pipe to send on."""
    try:
        sock.send_multipart(wire.encode(_message()), zmq.NOBLOCK)
    except zmq.Again:
        pass


def test_van_stamps_each_message_with_the_key_that_sent_it(keys):
    server = Van("eu", "127.0.0.1", 0, credentials=credentials_for(keys, "eu"))
    peer = Van("us", "127.0.0.1", 0, credentials=credentials_for(keys, "us"))
    try:
        peer.connect("eu", server.address, principal="eu")
        peer.node_id = 1        # a claim; the origin is what the key proves
        peer.send("eu", _message())
        msg = server.recv(10)
        assert msg.kind == wire.Kind.PROBE and msg.origin == "us" and msg.sender == 1
    finally:
        peer.close()
        server.close()


def test_large_frames_over_curve_are_copied_not_tracked_by_pyzmqs_collector(keys,
                                                                           monkeypatch):
    """CURVE encrypts a copy of every message: a zero-copy send would only cost a wake-up of
    pyzmq's garbage-collector thread per frame. Plain connections stay zero-copy."""
    tracked = []
    store = garbage.gc.store
    monkeypatch.setattr(garbage.gc, "store", lambda *a: tracked.append(1) or store(*a))
    big = wire.Message(wire.Kind.PROBE, sender=1, dtype=np.float32,
                       frames=[np.arange(1 << 18, dtype=np.float32)])       # 1 MiB
    for creds in (True, False):
        server = Van("eu", "127.0.0.1", 0,
                     credentials=credentials_for(keys, "eu") if creds else None)
        peer = Van("us", "127.0.0.1", 0,
                   credentials=credentials_for(keys, "us") if creds else None)
        try:
            peer.connect("eu", server.address, principal="eu")
            peer.send("eu", big)
            got = server.recv(10)
            assert np.array_equal(got.arrays()[0], big.frames[0])
        finally:
            peer.close()
            server.close()
        assert bool(tracked) is not creds
        tracked.clear()


def test_foreign_peers_without_a_listed_key_reach_nothing(keys, caplog):
    """No key (plain ZeroMQ), a stranger's CURVE key, and a listed public key without its
    secret: nothing arrives, the refusals are counted and logged."""
    server = Van("eu", "127.0.0.1", 0, credentials=credentials_for(keys, "eu"))
    ctx = zmq.Context()
    stranger = KeyPair.generate()
    try:
        plain = ctx.socket(zmq.DEALER)
        wrong = ctx.socket(zmq.DEALER)
        wrong.curve_serverkey = keys.keys["eu"].encode()
        wrong.curve_publickey, wrong.curve_secretkey = stranger.public, stranger.secret
        posing = ctx.socket(zmq.DEALER)          # claims us's public key, lacks its secret
        posing.curve_serverkey = keys.keys["eu"].encode()
        posing.curve_publickey, posing.curve_secretkey = keys.keys["us"].encode(), \
            stranger.secret
        for sock in (plain, wrong, posing):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(server.address)
            _send_unless_refused(sock)
        assert server.recv(1.5) is None
        assert server.zap.refused >= 1
        assert "refused a connection from 127.0.0.1: unknown key" in caplog.text
        for sock in (plain, wrong, posing):
            sock.close()
    finally:
        ctx.term()
        server.close()


def test_connecting_to_a_principal_without_a_key_is_a_transport_error(keys):
    van = Van("eu", "127.0.0.1", 0, credentials=credentials_for(keys, "eu"))
    try:
        with pytest.raises(TransportError, match="no public key for DC mars"):
            van.connect("x", "tcp://127.0.0.1:1", principal="mars")
    finally:
        van.close()


def test_plain_vans_stamp_no_origin():
    a, b = Van("a", "127.0.0.1", 0), Van("b", "127.0.0.1", 0)
    try:
        b.connect("a", a.address)
        b.send("a", _message())
        assert a.recv(10).origin is None and a.zap is None
    finally:
        b.close()
        a.close()


def test_the_same_host_endpoint_is_plain_own_user_only_and_named_as_this_dc(keys, tmp_path):
    """A DC's nodes on one host talk over ipc:// without CURVE (the bytes never leave the
    machine); the TCP endpoint of the same socket still admits CURVE only. What comes in
    through ipc:// carries this node's own principal."""
    # a folder short enough for a Unix socket's path (pytest's own grows with its run
    # count: past 1000 runs the Van fell back to the system's temporary folder)
    local = Path(tempfile.mkdtemp(prefix="ns-"))
    server = Van("eu", "127.0.0.1", 0, credentials=credentials_for(keys, "eu"),
                 local_dir=str(local))
    ctx = zmq.Context()
    try:
        assert server.local_address.startswith(f"ipc://{local}/netstorm-")
        folder = server.local_address[len("ipc://"):].rsplit("/", 1)[0]
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        plain_tcp, plain_ipc = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
        plain_tcp.connect(server.address)
        plain_ipc.connect(server.local_address)
        plain_tcp.send_multipart(wire.encode(_message(sender=5)))
        plain_ipc.send_multipart(wire.encode(_message(sender=6)))
        msg = server.recv(5)
        assert msg.sender == 6 and msg.origin == "eu"
        assert server.recv(1) is None                       # plain TCP never gets in
        for sock in (plain_tcp, plain_ipc):
            sock.close(linger=0)
    finally:
        ctx.term()
        server.close()
        shutil.rmtree(local, ignore_errors=True)
    assert not os.path.exists(folder)


def test_a_van_connects_over_ipc_in_plain_and_over_tcp_with_curve(keys, tmp_path):
    worker = Van("eu worker", "127.0.0.1", 0, credentials=credentials_for(keys, "eu"),
                 local_dir=str(tmp_path))
    server = Van("eu", "127.0.0.1", 0, credentials=credentials_for(keys, "eu"),
                 local_dir=str(tmp_path))
    try:
        worker.connect("server", server.local_address, principal="eu")
        worker.connect("server-tcp", server.address, principal="eu")
        worker.send("server", _message(sender=3))
        worker.send("server-tcp", _message(sender=4))
        got = sorted((m.kind, m.origin) for m in (server.recv(5), server.recv(5)))
        assert got == [(wire.Kind.PROBE, "eu")] * 2
    finally:
        worker.close()
        server.close()


def test_a_socket_path_too_long_for_unix_goes_to_tmp(tmp_path):
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    van = Van("eu", "127.0.0.1", 0, local_dir=str(deep))
    try:
        assert van.local_address.startswith("ipc:///tmp/netstorm-")
    finally:
        van.close()


def _wait_for(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


@pytest.mark.parametrize("posing, why", [
    (False, "(no CURVE at one end|the connection ended during the handshake .*no CURVE at "
            "the other end)"),
    (True, "the CURVE keys do not match")])
def test_handshakes_refused_before_zap_is_asked_are_logged_with_the_reason(keys, caplog,
                                                                           posing, why):
    """A peer without CURVE, and one presenting a listed public key without its secret, are
    refused by ZeroMQ before the ZAP handler is asked: the listening socket's monitor logs
    them with the reason (a plain peer may hang up first: then the server sees the
    connection end) and the address read from the accepted connection, if still open."""
    server = Van("eu", "127.0.0.1", 0, credentials=credentials_for(keys, "eu"))
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    if posing:                          # claims us's public key, lacks its secret
        sock.curve_serverkey = keys.keys["eu"].encode()
        sock.curve_publickey = keys.keys["us"].encode()
        sock.curve_secretkey = KeyPair.generate().secret
    refused = r"eu: refused a connection from (127\.0\.0\.1|an unknown address \(closed " \
              r"before it was read\)): "
    try:
        sock.connect(server.address)
        _send_unless_refused(sock)
        assert _wait_for(lambda: re.search(refused + why, caplog.text)), caplog.text
        assert server.recv(0.2) is None
    finally:
        sock.close(linger=0)
        ctx.term()
        server.close()


def test_the_address_of_an_accepted_connection_is_read_while_it_is_open():
    import socket
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            conn, _ = listener.accept()
            with conn:
                assert security._peer_address(conn.fileno(), port) == "127.0.0.1"
                assert security._peer_address(conn.fileno(), port + 1) == ""   # not ours
                fd = conn.fileno()
            assert security._peer_address(fd, port) == ""                      # closed
        with open(__file__) as not_a_socket:
            before = len(os.listdir("/proc/self/fd"))
            assert security._peer_address(not_a_socket.fileno(), port) == ""
            assert len(os.listdir("/proc/self/fd")) == before                   # no leak
            assert client


def test_a_socket_reusing_a_closed_ones_descriptor_gets_its_own_monitor():
    """The chaos run's scheduler reconnected to a replaced server while the old
    connection's monitor still held pyzmq's default monitor name (made of the socket's file
    descriptor, which the new socket reused): "Address already in use", and the run ended."""
    import zmq
    from netstorm.geoserver.core.security import watch_events
    ctx = zmq.Context()
    sock, stale = ctx.socket(zmq.DEALER), ctx.socket(zmq.PAIR)
    try:
        stale.bind(f"inproc://monitor.s-{sock.FD}")     # an old monitor's default name
        watch_events(sock, zmq.EVENT_CONNECTED, lambda *args: True)     # no EADDRINUSE
    finally:
        sock.close(linger=0)        # its monitor's thread stops and closes the monitor
        stale.close(linger=0)
        ctx.term()
