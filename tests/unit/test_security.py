"""Keys, credentials and the ZAP handler (geoserver/core/security.py), and the Van with CURVE: a
listed key is admitted and named on every message, a stranger's key or no key at all is not."""

import os
import stat

import pytest
import zmq
from netstorm.geoserver.config.keys import (
    KeyPair,
    SecurityConfig,
    SecurityError,
    generate_cluster_keys,
    key_file_name,
    read_key_pair,
    write_key_pair,
)
from netstorm.geoserver.core import security
from netstorm.geoserver.core.security import (
    Credentials,
    credentials_for,
    node_credentials,
    principal_of,
    user_id,
    worker_credentials,
    zap_reply,
)
from zmq.utils import z85


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


def test_credentials_name_their_own_principal():
    pair = KeyPair.generate()
    assert Credentials(pair, "eu", {pair.public: "eu"}).server_key("eu") == pair.public


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
