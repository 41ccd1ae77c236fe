"""Keys, credentials and the ZAP handler (geoserver/core/security.py), and the Van with CURVE: a
listed key is admitted and named on every message, a stranger's key or no key at all is not."""
import os
import re
import stat
import time

import numpy as np
import pytest
import zmq
from zmq.utils import garbage, z85

from netstorm.geoserver.core import security, wire
from netstorm.geoserver.core.security import Credentials, credentials_for, node_credentials, principal_of, user_id, worker_credentials, zap_reply
from netstorm.geoserver.config.keys import KeyPair, SecurityConfig, SecurityError, generate_cluster_keys, key_file_name, read_key_pair, write_key_pair
from netstorm.geoserver.core.van import TransportError, Van


def test_key_files_are_private_never_overwritten_and_read_back(tmp_path):
    pair = KeyPair.generate()
    path = write_key_pair(tmp_path / "keys", "eu", pair)
    assert path.name == "dc-eu.key_secret"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "keys").st_mode) == 0o700
    assert read_key_pair(path) == pair
    with pytest.raises(SecurityError, match="exists: remove it"):
        write_key_pair(tmp_path / "keys", "eu", KeyPair.generate())
    assert read_key_pair(path) == pair


def test_a_dc_called_scheduler_does_not_share_the_schedulers_key_file():
    assert key_file_name("") == "scheduler.key_secret"
    assert key_file_name("scheduler") == "dc-scheduler.key_secret"
    assert principal_of(user_id("scheduler").decode()) == "scheduler"
    assert principal_of(user_id("").decode()) == ""
    assert principal_of(None) is None and principal_of("mallory") is None


def test_unreadable_or_mismatched_key_files_are_clear_errors(tmp_path):
    with pytest.raises(SecurityError, match="cannot read the secret key .*nothing"):
        read_key_pair(tmp_path / "nothing")
    one, other = KeyPair.generate(), KeyPair.generate()
    path = write_key_pair(tmp_path, "eu", KeyPair(other.public, one.secret))
    with pytest.raises(SecurityError, match="does not belong to its secret key"):
        read_key_pair(path)
    with pytest.raises(SecurityError, match="40 characters"):
        security.check_key("short", "here")
    with pytest.raises(SecurityError, match="a key must be a string"):
        security.check_key(7, "here")


def test_credentials_come_from_the_listed_keys_and_this_hosts_secret(tmp_path):
    config = generate_cluster_keys(["eu", "us"], tmp_path / "keys")
    creds = credentials_for(config, "eu")
    assert creds.principal == "eu"
    assert sorted(creds.admitted.values()) == ["", "eu", "us"]
    assert creds.server_key("us") == config.keys["us"].encode()
    with pytest.raises(SecurityError, match="no public key for DC mars"):
        creds.server_key("mars")
    with pytest.raises(SecurityError, match="lists no public key for DC mars"):
        credentials_for(config, "mars")
    other = generate_cluster_keys(["eu", "us"], tmp_path / "other")
    swapped = SecurityConfig(public_keys=other.public_keys, secret_keys=config.secret_keys)
    with pytest.raises(SecurityError, match="not the key pair of DC eu that the cluster file"):
        credentials_for(swapped, "eu")


def test_a_file_without_keys_names_the_command_that_makes_them(caplog):
    with pytest.raises(SecurityError, match="netstorm-keygen c.toml"):
        node_credentials(SecurityConfig(), "eu", "c.toml")
    assert node_credentials(SecurityConfig(curve=False), "eu", "c.toml") is None
    assert "CURVE is off" in caplog.text


def test_a_worker_admits_its_dcs_server_and_the_scheduler_only(tmp_path):
    config = generate_cluster_keys(["eu", "us"], tmp_path)
    creds = worker_credentials("eu", tmp_path / "dc-eu.key_secret", config.keys[""])
    assert sorted(creds.admitted.values()) == ["", "eu"]


def _zap(mechanism=b"CURVE", credentials=(b"k" * 32,)):
    return [b"1.0", b"7", b"", b"10.0.0.9", b"", mechanism, *credentials]


def test_zap_admits_listed_curve_keys_only_and_names_them():
    pair = KeyPair.generate()
    admitted = {pair.public: "eu"}
    reply, who, peer = zap_reply(_zap(credentials=(z85.decode(pair.public),)),
                                 admitted)
    assert reply[:4] == [b"1.0", b"7", b"200", b"OK"] and reply[4] == b"dc:eu"
    assert who == "eu" and peer == "10.0.0.9"
    for request in (_zap(), _zap(mechanism=b"NULL", credentials=()),
                    _zap(mechanism=b"PLAIN", credentials=(b"u", b"p")), [b"1.0"], []):
        reply, who, _ = zap_reply(request, admitted)
        assert reply[2] == b"400" and who is None and reply[4] == b""


@pytest.fixture
def keys(tmp_path):
    return generate_cluster_keys(["eu", "us"], tmp_path / "keys")


def _message(sender=1):
    return wire.Message(wire.Kind.PROBE, sender=sender, dtype=np.float32,
                        frames=[np.ones(3, np.float32)])


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
            sock.send_multipart(wire.encode(_message()))
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


def test_credentials_name_their_own_principal():
    pair = KeyPair.generate()
    assert Credentials(pair, "eu", {pair.public: "eu"}).server_key("eu") == pair.public


def test_the_same_host_endpoint_is_plain_own_user_only_and_named_as_this_dc(keys, tmp_path):
    """A DC's nodes on one host talk over ipc:// without CURVE (the bytes never leave the
    machine); the TCP endpoint of the same socket still admits CURVE only. What comes in
    through ipc:// carries this node's own principal."""
    server = Van("eu", "127.0.0.1", 0, credentials=credentials_for(keys, "eu"),
                 local_dir=str(tmp_path))
    ctx = zmq.Context()
    try:
        assert server.local_address.startswith(f"ipc://{tmp_path}/netstorm-")
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


def test_handshake_failures_are_named_by_what_zeromq_reports():
    assert "CURVE on one side only" in security.handshake_failure(
        zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
    assert "keys do not match" in security.handshake_failure(
        zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
    assert "refused this node's key" in security.handshake_failure(
        zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400)
    assert "ended during the handshake" in security.handshake_failure(
        zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, 104)
    assert security.handshake_failure(zmq.EVENT_ACCEPTED, 12) is None


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
        sock.send_multipart(wire.encode(_message()))
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


def test_a_missing_secret_key_folder_names_the_folder_and_the_cluster_file_field(tmp_path):
    config = generate_cluster_keys(["eu", "us"], tmp_path / "keys")
    gone = SecurityConfig(public_keys=config.public_keys, secret_keys=str(tmp_path / "gone"))
    with pytest.raises(SecurityError, match=rf"the secret key folder {tmp_path}/gone does not "
                                            rf"exist \(\[security\] secret_keys\)"):
        credentials_for(gone, "eu")
    (tmp_path / "keys" / "dc-eu.key_secret").unlink()
    with pytest.raises(SecurityError, match=rf"cannot read the secret key {tmp_path}/keys/"
                                            rf"dc-eu.key_secret: no such file \(\[security\] "
                                            rf"secret_keys\)"):
        credentials_for(config, "eu")
    with pytest.raises(SecurityError, match=r"the secret key folder .*/gone does not exist "
                                            r"\(NETSTORM_KEY_FILE, from the cluster file's "
                                            r"\[security\] secret_keys\)"):
        worker_credentials("eu", tmp_path / "gone" / "dc-eu.key_secret", config.keys[""])
