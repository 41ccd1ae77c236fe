"""What runs in a pod: the init container's wait for the Services' names (a fake resolver
and clock: no DNS), and the worker's environment, the launcher's own for its DC and index,
bound to its pod's address. Starting the worker command is the launcher's (tested there)."""
from __future__ import annotations

import json
import socket

import pytest

from netstorm.deploy import pod
from netstorm.geoserver.config.cluster import load_cluster

CLUSTER = """
[scheduler]
host = "0.0.0.0"
advertise = "127.0.0.1"
port = 9000
[[dc]]
name = "eu"
host = "0.0.0.0"
advertise = "127.0.0.2"
server_port = 9100
workers = 2
[security]
curve = true
secret_keys = "/etc/netstorm-keys"
scheduler_key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
[security.dc_keys]
eu = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
"""


class FakeDns:
    """Names resolve once ``appear_at`` (name -> time) has come; the clock moves by sleeps."""

    def __init__(self, appear_at: dict):
        self.appear_at, self.now, self.sleeps = appear_at, 0.0, 0

    def resolve(self, name, *_):
        if self.now < self.appear_at.get(name, float("inf")):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", 0))]

    def sleep(self, seconds):
        self.now += seconds
        self.sleeps += 1

    def clock(self):
        return self.now


def test_wait_returns_once_every_name_resolves():
    dns = FakeDns({"a": 0.0, "b": 3.0})
    assert pod.wait_for_names(["a", "b"], 10, dns.resolve, dns.sleep, dns.clock) == []
    assert dns.sleeps == 3


def test_wait_gives_up_naming_what_never_resolved():
    dns = FakeDns({"a": 0.0})
    assert pod.wait_for_names(["a", "never"], 5, dns.resolve, dns.sleep, dns.clock) == ["never"]
    assert dns.now == 5


def test_the_worker_gets_the_launchers_environment_at_its_pods_address(tmp_path):
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(CLUSTER)
    env = pod.worker_environment(load_cluster(cluster), "eu", 1, "10.4.0.7", str(tmp_path),
                                 as_dist_sync=True)
    assert env["NETSTORM_HOST"] == "10.4.0.7"
    assert env["NETSTORM_DC"] == "eu" and env["NETSTORM_LOCAL_INDEX"] == "1"
    assert env["NETSTORM_SCHEDULER"] == "tcp://127.0.0.1:9000"
    assert env["NETSTORM_KEY_FILE"] == "/etc/netstorm-keys/dc-eu.key_secret"
    assert env["NETSTORM_AS_DIST_SYNC"] == "1"
    assert env["NETSTORM_REASON_FILE"].startswith(str(tmp_path))
    assert env["PYTHONPATH"].split(":")[0].endswith("launcher/boot")


@pytest.mark.parametrize("argv, named", [
    (["--dc", "nope", "--index", "0"], "no DC named 'nope'"),
    (["--dc", "eu", "--index", "2"], "--index 2"),
])
def test_a_worker_the_file_does_not_have_fails_before_starting(tmp_path, capsys, argv, named):
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(CLUSTER)
    reason = tmp_path / "termination-log"
    code = pod.main(["worker", "--cluster", str(cluster), "--host", "10.4.0.7",
                     "--reason-file", str(reason), *argv, "--", "python", "t.py"])
    assert code == 2
    assert named in capsys.readouterr().err
    assert named in json.loads(reason.read_text())["reason"]


def test_a_worker_without_a_command_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        pod.parse_args(["worker", "--cluster", "c", "--dc", "eu", "--index", "0",
                        "--host", "h", "--"])
    assert stop.value.code == 2
    assert "worker command" in capsys.readouterr().err


def test_a_missing_cluster_file_is_named(tmp_path, capsys):
    missing = tmp_path / "none.toml"
    assert pod.main(["worker", "--cluster", str(missing), "--dc", "eu", "--index", "0",
                     "--host", "h", "--", "python", "t.py"]) == 2
    assert str(missing) in capsys.readouterr().err
