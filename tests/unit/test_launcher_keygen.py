"""netstorm-keygen (netstorm/launcher/keygen.py) and the launcher's key handling: keys are
added to the cluster file and read back; a file that has keys is left alone; a partial
launch without keys is a clear error; a whole local cluster gets throw-away keys."""

import os
import stat
import pytest
from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster
from netstorm.geoserver.core.security import credentials_for
from netstorm.geoserver.config.keys import SecurityError
from netstorm.launcher.keygen import keygen, main

FILE = """\
[scheduler]   # a comment the user wrote
host = "127.0.0.1"
port = 9000

[[dc]]
name = "eu"
host = "127.0.0.1"
server_port = 0
workers = 2

[[dc]]
name = "scheduler"          # a DC may even be called that
host = "127.0.0.1"
server_port = 0
workers = 1
"""


def test_keygen_adds_every_public_key_and_keeps_the_file(tmp_path, capsys):
    path = tmp_path / "cluster.toml"
    path.write_text(FILE)
    assert main([str(path)]) == 0
    text = path.read_text()
    assert text.startswith(FILE)                       # the user's text, comments and all
    config = load_cluster(path)
    assert set(config.security.keys) == {"", "eu", "scheduler"}
    assert config.security.secret_keys == str(tmp_path / "cluster-keys")
    assert 'secret_keys = "cluster-keys"' in text      # relative: the folder can move
    for name in ("scheduler.key_secret", "dc-eu.key_secret", "dc-scheduler.key_secret"):
        path_ = tmp_path / "cluster-keys" / name
        assert stat.S_IMODE(os.stat(path_).st_mode) == 0o600
    for principal in ("", "eu", "scheduler"):
        assert credentials_for(config.security, principal).principal == principal
    assert "give each host only the secret keys" in capsys.readouterr().out


def test_keygen_leaves_a_file_with_a_security_table_alone(tmp_path, capsys):
    path = tmp_path / "cluster.toml"
    path.write_text(FILE)
    keygen(path)
    before = path.read_text()
    assert main([str(path)]) == 2
    assert "already has a [security] table" in capsys.readouterr().err
    assert path.read_text() == before
    path.write_text(FILE + "\n[security]\ncurve = false\n")
    with pytest.raises(ClusterFileError, match="already has a \\[security\\] table"):
        keygen(path)


def test_keygen_never_overwrites_secret_keys(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text(FILE)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "dc-eu.key_secret").write_text("mine")
    with pytest.raises(SecurityError, match="dc-eu.key_secret exists"):
        keygen(path, tmp_path / "keys")
    assert path.read_text() == FILE
    assert (tmp_path / "keys" / "dc-eu.key_secret").read_text() == "mine"
