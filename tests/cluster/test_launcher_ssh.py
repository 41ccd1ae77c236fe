"""launcher_ssh: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_launcher_ssh.py."""

import os
import signal
import subprocess
import sys
import threading
import time
import psutil
import pytest
from launching import REPO, launch, worker_cmd
from ssh_hosts import SshHosts
from unit.test_launcher_ssh import cluster_text


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
