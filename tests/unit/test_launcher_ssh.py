"""netstorm/launcher/ssh.py (and its far end, remote.py): one command starts every host.

The live tests run a real OpenSSH server on three loopback addresses (tests/ssh_hosts.py
installs it when missing) and launch a 3-DC cluster on them: a DC whose workers span two
hosts, a server that binds every interface and advertises one address."""

import json
import random
import tomllib
from dataclasses import replace
import pytest
from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster, parse_cluster
from netstorm.geoserver.config.hosts import SshConfig
from netstorm.geoserver.config.keys import generate_cluster_keys
from netstorm.launcher import placement
from netstorm.launcher.remote import parse_bundle
from netstorm.launcher.ssh import bundle, forwarded_env, principals_on
from ssh_hosts import SshHosts

CLUSTER = """
[scheduler]
host = "127.0.0.1"
port = {port}
[[dc]]
name = "a"
host = "127.0.0.1"
server_port = 0
workers = 1
[[dc]]
name = "b"
host = "127.0.0.2"
server_port = 0
workers = 2
worker_hosts = ["127.0.0.2", "127.0.0.3"]
[[dc]]
name = "c"
host = "0.0.0.0"
advertise = "127.0.0.3"
server_port = 0
workers = 1
{extra}
[transport]
timeout_s = 30
dead_after_s = 4
"""


def cluster_text(extra: str = "", ssh: str = "") -> str:
    return CLUSTER.format(port=random.randint(20000, 40000), extra=extra) + ssh


def test_ssh_bundle_carries_only_the_keys_each_host_needs(tmp_path):
    config = parse_cluster(tomllib.loads(cluster_text()))
    config = replace(config, security=generate_cluster_keys([dc.name for dc in config.dcs],
                                                            tmp_path / "keys"))
    sent = {h: bundle(config, h, ["python", "t.py"], {"OMP_NUM_THREADS": "1"}, "/w", True)
            for h in placement.hosts(config)}
    assert sorted(sent["127.0.0.1"]["keys"]) == ["dc-a.key_secret", "scheduler.key_secret"]
    assert sorted(sent["127.0.0.2"]["keys"]) == ["dc-b.key_secret"]
    assert sorted(sent["127.0.0.3"]["keys"]) == ["dc-b.key_secret", "dc-c.key_secret"]
    for host, data in sent.items():
        line = json.dumps(data).encode()
        assert parse_bundle(line) == data
        shipped = tmp_path / host / "cluster.toml"
        shipped.parent.mkdir()
        shipped.write_text(data["cluster"])
        loaded = load_cluster(shipped)      # the far end reads the same cluster
        assert loaded.dcs == config.dcs and loaded.security.keys == config.security.keys
        assert loaded.security.secret_keys == str(shipped.parent / "keys")


def test_ssh_principals_and_forwarded_environment():
    config = parse_cluster(tomllib.loads(cluster_text()))
    assert principals_on(config, placement.on_host(config, "127.0.0.3")) == ["c", "b"]
    environ = {"MXNET_ENGINE_TYPE": "x", "OMP_NUM_THREADS": "1", "PATH": "/v/bin",
               "HOME": "/root", "SECRET": "s"}
    assert forwarded_env(config, environ) == {"MXNET_ENGINE_TYPE": "x",
                                              "OMP_NUM_THREADS": "1", "PATH": "/v/bin"}
    config = replace(config, ssh=SshConfig(python="/opt/py", env=("HOME",)))
    assert forwarded_env(config, environ) == {"MXNET_ENGINE_TYPE": "x",
                                              "OMP_NUM_THREADS": "1", "HOME": "/root"}


@pytest.fixture(scope="module")
def ssh_hosts(tmp_path_factory):
    hosts = SshHosts(tmp_path_factory.mktemp("sshd"))
    yield hosts
    hosts.close()


def test_ssh_bundle_names_a_secret_key_it_cannot_read(tmp_path):
    config = parse_cluster(tomllib.loads(cluster_text()))
    keys = generate_cluster_keys([dc.name for dc in config.dcs], tmp_path / "keys")
    (tmp_path / "keys" / "dc-b.key_secret").unlink()
    with pytest.raises(ClusterFileError, match=r"dc-b.key_secret that 127.0.0.2 needs"):
        bundle(replace(config, security=keys), "127.0.0.2", ["t"], {}, "/w", False)
