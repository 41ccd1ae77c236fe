"""netstorm/launcher/ssh.py (and its far end, remote.py): one command starts every host.

The live tests run a real OpenSSH server on three loopback addresses (tests/ssh_hosts.py
installs it when missing) and launch a 3-DC cluster on them: a DC whose workers span two
hosts, a server that binds every interface and advertises one address."""
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import replace

import psutil
import pytest

from launching import REPO, launch, worker_cmd
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


def _no_sessions_left(hosts, within_s: float = 10.0) -> list:
    deadline = time.monotonic() + within_s
    while hosts.sessions() and time.monotonic() < deadline:
        time.sleep(0.2)
    return hosts.sessions()


@pytest.mark.slow
def test_ssh_launch_trains_the_example_on_three_hosts(ssh_hosts, tmp_path):
    """One command, three hosts: every worker ends with the same accuracy (same weights),
    each host ran what the file places on it, and nothing is left running anywhere."""
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_text(ssh=ssh_hosts.ssh_table()))
    run = launch(["--cluster", path, "--ssh"],
                 [sys.executable, str(REPO / "examples" / "train_gluon.py"), "--epochs", "2"],
                 tmp_path, timeout=240)
    assert run.code == 0, run.output[-4000:]
    summaries = [l for l in run.output.splitlines() if "summary rank=" in l]
    assert len(summaries) == 4, run.output[-4000:]
    assert len({l.split("accuracy=")[1].split()[0] for l in summaries}) == 1
    assert any(l.startswith("[host 127.0.0.3] [worker b/1] summary") for l in summaries)
    assert any(l.startswith("[host 127.0.0.2] [worker b/0] summary") for l in summaries)
    assert "server of c is node" in run.output and "at tcp://127.0.0.3:" in run.output
    assert "[launch] ok: 3 host(s), 3 DC(s), 4 worker(s)" in run.output
    assert not _no_sessions_left(ssh_hosts)


@pytest.mark.slow
def test_ssh_launch_tears_every_host_down_when_a_remote_worker_is_killed(ssh_hosts, tmp_path):
    """SIGKILL worker b/1 (on 127.0.0.3, its server on .2): the launch fails naming that
    worker and its host, every other host is stopped, and no process remains on any."""
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_text(ssh=ssh_hosts.ssh_table()))
    killed = []

    def kill_b1():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for pid, cmd in ssh_hosts.sessions():
                try:
                    env = psutil.Process(pid).environ()
                except psutil.Error:
                    continue
                if "fault_worker.py" in cmd and env.get("NETSTORM_DC") == "b" \
                        and env.get("NETSTORM_LOCAL_INDEX") == "1":
                    time.sleep(3)       # well into training
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.3)

    killer = threading.Thread(target=kill_b1)
    killer.start()
    run = launch(["--cluster", path, "--ssh"], worker_cmd("fault_worker.py", "loop", 100000),
                 tmp_path, timeout=120)
    killer.join()
    assert killed, run.output[-3000:]
    assert run.code != 0
    assert ("[launch] host 127.0.0.3 exited with code 1: worker b/1 was killed by SIGKILL; "
            "stopping the cluster") in run.output, run.output[-3000:]
    # the other hosts stop either on the launching host's stop line or, if the scheduler's
    # abort reached their workers first, on their own, each naming the cause
    stopped = "the launching host stops this one: host 127.0.0.3" in run.output
    aborted = all(f"[host {h}] [launch] FAILED" in run.output and
                  f"[host {h}] [launch] worker" in run.output for h in ("127.0.0.1", "127.0.0.2"))
    assert stopped or aborted, run.output[-3000:]
    assert "worker b/1 was killed by SIGKILL" in run.output
    assert not _no_sessions_left(ssh_hosts)


@pytest.mark.slow
def test_ssh_launch_ctrl_c_stops_every_host(ssh_hosts, tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_text(ssh=ssh_hosts.ssh_table()))
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "launch.py"), "--cluster",
                             str(path), "--ssh", "--", *worker_cmd("fault_worker.py", "sleep")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO,
                            env=dict(os.environ, TMPDIR=str(tmp_path)))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and \
            sum("fault_worker.py" in cmd for _, cmd in ssh_hosts.sessions()) < 4:
        time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out.decode()[-3000:]
    assert "the launching host stops this one: its connection closed" in out.decode()
    assert not _no_sessions_left(ssh_hosts)


@pytest.mark.slow
def test_ssh_launch_names_a_host_that_does_not_answer(ssh_hosts, tmp_path):
    """A DC on 127.0.0.4, where no sshd listens: the launch fails at once naming the host
    and ssh's reason, and the hosts that did start are stopped."""
    extra = ('[[dc]]\nname = "d"\nhost = "127.0.0.4"\nserver_port = 0\nworkers = 1\n')
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_text(extra=extra, ssh=ssh_hosts.ssh_table()))
    began = time.monotonic()
    run = launch(["--cluster", path, "--ssh"], worker_cmd("fault_worker.py", "loop", 5),
                 tmp_path, timeout=120)
    assert run.code == 255, run.output[-3000:]
    assert time.monotonic() - began < 30
    assert "[launch] host 127.0.0.4 exited with code 255: ssh: connect to host 127.0.0.4" \
        in run.output, run.output[-3000:]
    assert not _no_sessions_left(ssh_hosts)


def test_ssh_flag_needs_a_cluster_file_and_excludes_dc(tmp_path):
    run = launch(["--dcs", 2, "--ssh"], ["true"], tmp_path, timeout=30)
    assert run.code == 2 and "--ssh needs --cluster FILE" in run.output
    path = tmp_path / "c.toml"
    path.write_text(cluster_text())
    run = launch(["--cluster", path, "--ssh", "--dc", "a"], ["true"], tmp_path, timeout=30)
    assert run.code == 2 and "--ssh and --dc exclude each other" in run.output
    run = launch(["--cluster", path, "--host", "127.0.0.9"], ["true"], tmp_path, timeout=30)
    assert run.code == 2 and "places no process on 127.0.0.9; its hosts are 127.0.0.1, " \
                             "127.0.0.2, 127.0.0.3" in run.output, run.output


def test_ssh_bundle_names_a_secret_key_it_cannot_read(tmp_path):
    config = parse_cluster(tomllib.loads(cluster_text()))
    keys = generate_cluster_keys([dc.name for dc in config.dcs], tmp_path / "keys")
    (tmp_path / "keys" / "dc-b.key_secret").unlink()
    with pytest.raises(ClusterFileError, match=r"dc-b.key_secret that 127.0.0.2 needs"):
        bundle(replace(config, security=keys), "127.0.0.2", ["t"], {}, "/w", False)
