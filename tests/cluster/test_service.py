"""The scheduler: registration checks, liveness (dead worker or server -> clear abort)."""
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from launching import REPO, WORKERS, free_port
from netstorm.geoserver.core import wire
from netstorm.geoserver.config.exit_reasons import EXIT_ABORTED
from netstorm.geoserver.config.cluster import Link, pseudo_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.core.security import credentials_for
from netstorm.geoserver.core.van import Van
from netstorm.launcher.supervisor import with_keys, worker_env

pytestmark = pytest.mark.slow


class ManualCluster:
    """Scheduler, servers and workers started one by one, without the launcher, so the test
    can kill any of them and watch what the others do (as on real hosts). With CURVE keys,
    made once for the cluster as keygen would."""

    def __init__(self, tmp_path, dcs=2, workers_per_dc=1, **transport):
        self.config = with_keys(pseudo_cluster(dcs, workers_per_dc, free_port(), **transport),
                                tmp_path, whole_cluster=True)
        self.file = tmp_path / "cluster.toml"
        self.file.write_text(to_toml(self.config))
        self.env = dict(os.environ, TMPDIR=str(tmp_path))
        self.procs = {}
        self.read = {}          # name -> what wait_ready read of its output
        # the servers' sockets: a short path (pytest's would not fit a Unix socket), removed
        # with the cluster even if its processes were killed
        self.run_dir = tempfile.TemporaryDirectory(prefix="netstorm-test-", dir="/tmp")

    def start(self, name, argv, **env):
        self.procs[name] = subprocess.Popen(argv, env=dict(self.env, **env), cwd=REPO,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def start_all(self, mode="loop", rounds=100000):
        py = sys.executable
        self.start("scheduler", [py, "-m", "netstorm.scheduler", "--cluster", str(self.file)])
        for dc in self.config.dcs:
            self.start(f"server {dc.name}", self.server_argv(dc))
            for i in range(dc.workers):
                self.start(f"worker {dc.name}/{i}",
                           [py, str(WORKERS / "fault_worker.py"), mode, str(rounds)],
                           **worker_env(self.config, dc, i), NETSTORM_RUN_DIR=self.run_dir.name)

    def wait_ready(self, timeout=120.0) -> None:
        """Until every worker said ``rank N ready`` (registered, its key initialized): a
        fixed sleep is not enough on a loaded machine, where a worker killed before it
        registered is only missing, never dead. The lines read are kept for :meth:`wait`."""
        deadline = time.monotonic() + timeout
        for name, proc in self.procs.items():
            if not name.startswith("worker"):
                continue
            while True:
                left = deadline - time.monotonic()
                assert left > 0, f"{name} not ready within {timeout}s"
                readable, _, _ = select.select([proc.stdout], [], [], left)
                line = proc.stdout.readline() if readable else b""
                self.read[name] = self.read.get(name, b"") + line
                if b" ready" in line:
                    break
                assert line or not readable, f"{name} ended before it was ready: " \
                    f"{self.read[name].decode()[-2000:]}"

    def server_argv(self, dc) -> list:
        """A server of ``dc``, its same-host socket in this cluster's own short folder."""
        return [sys.executable, "-m", "netstorm.geoserver", "--cluster", str(self.file),
                "--dc", dc.name, "--run-dir", self.run_dir.name]

    def wait(self, name, timeout):
        proc = self.procs[name]
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, (self.read.pop(name, b"") + out).decode()

    def close(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        self.run_dir.cleanup()


@pytest.fixture
def manual(tmp_path):
    clusters = []

    def make(**kw):
        clusters.append(ManualCluster(tmp_path, **kw))
        return clusters[-1]
    yield make
    for c in clusters:
        c.close()


@pytest.mark.parametrize("victim", ["worker dc1/0", "server dc1"])
def test_dead_node_aborts_everyone_with_its_name(manual, victim):
    cluster = manual(dead_after_s=2.0, heartbeat_s=0.2, timeout_s=60.0)
    cluster.start_all()
    cluster.wait_ready()
    time.sleep(1)                         # rounds running
    assert cluster.procs["worker dc0/0"].poll() is None
    cluster.procs[victim].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    code, out = cluster.wait("worker dc0/0", timeout=30)
    assert code != 0
    assert "presumed dead" in out, out[-3000:]
    dead = "worker rank 1 (dc1/0" if victim.startswith("worker") else "server of dc1"
    assert dead in out
    assert time.monotonic() - killed_at < 15       # dead_after_s + slack, not timeout_s
    for name in ("scheduler", "server dc0"):     # stopped because another node failed
        code, _ = cluster.wait(name, timeout=10)
        assert code == EXIT_ABORTED


def test_a_dead_scheduler_stops_every_node_naming_it_within_dead_after_s(manual):
    """Issue 11, part 4: the scheduler beats to every node as they beat to it; killed, it is
    named by every server and worker within dead_after_s (plus one beat), not after
    timeout_s or never."""
    cluster = manual(dead_after_s=2.0, heartbeat_s=0.2, timeout_s=60.0)
    cluster.start_all()
    cluster.wait_ready()
    time.sleep(1)                         # rounds running
    assert all(p.poll() is None for p in cluster.procs.values())
    cluster.procs["scheduler"].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    for name in ("server dc0", "server dc1", "worker dc0/0", "worker dc1/0"):
        code, out = cluster.wait(name, timeout=30)
        assert code != 0, (name, out[-2000:])
        assert "the scheduler at tcp://127.0.0.1:" in out and "it is presumed dead" in out, \
            (name, out[-2000:])
    assert time.monotonic() - killed_at < 2.0 + 5


def test_round_gate_without_scheduler_aborts_clearly(manual, tmp_path):
    """With the round gate (adapt) a server starts no round the scheduler has not opened: if
    the scheduler dies, the servers stop with a clear error within timeout_s, not hang."""
    links = (Link("dc0", "dc1", 100.0, 100.0),)
    stats = tmp_path / "stats.jsonl"
    cluster = manual(heartbeat_s=0.2, timeout_s=10.0, dead_after_s=60.0, adapt=True,
                     policy="fapt", links=links, stats=str(stats),
                     detect_floor_s=0.0)    # not the scheduler's closed connection first
    cluster.start_all()
    deadline = time.monotonic() + 60
    while '"round":3,' not in (stats.read_text() if stats.exists() else ""):
        assert time.monotonic() < deadline, "round 3 never opened"
        time.sleep(0.2)                   # rounds are running
    assert cluster.procs["server dc0"].poll() is None
    cluster.procs["scheduler"].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    code, out = cluster.wait("server dc0", timeout=30)
    assert code != 0
    assert "not opened by the scheduler within timeout_s=10s" in out, out[-3000:]
    assert time.monotonic() - killed_at < 10.0 + 10      # timeout_s + slack


def test_scheduler_rejects_bad_registrations(manual, tmp_path):
    cluster = manual(dcs=1, timeout_s=4.0)
    cluster.start("scheduler", [sys.executable, "-m", "netstorm.scheduler", "--cluster",
                                str(cluster.file)])
    van = Van("test", "127.0.0.1", 0, credentials=credentials_for(cluster.config.security,
                                                                  "dc0"))
    try:
        van.connect("s", cluster.config.scheduler_address)
        for meta, reason in [({"role": "worker", "dc": "mars", "address": van.address},
                              "registration as a worker of DC 'mars' was sent with the key "
                              "of DC dc0"),
                             ({"role": "pilot", "dc": "dc0", "address": van.address},
                              "unknown role 'pilot'")]:
            van.send("s", wire.Message(wire.Kind.REGISTER, meta=meta))
            reply = van.recv(10)
            assert reply is not None and reply.kind == wire.Kind.ERROR
            assert reason in reply.meta["reason"]
    finally:
        van.close()
    code, out = cluster.wait("scheduler", timeout=20)
    assert code == EXIT_ABORTED
    assert "still missing: 1 server(s) of dc0, 1 worker(s) of dc0" in out


def test_worker_without_scheduler_times_out_naming_it(tmp_path):
    env = dict(os.environ, NETSTORM_DC="dc0", NETSTORM_INSECURE="1",
               NETSTORM_SCHEDULER=f"tcp://127.0.0.1:{free_port()}", NETSTORM_TIMEOUT_S="1")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(WORKERS / "fault_worker.py"), "loop"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode != 0
    assert "waited 2s for the scheduler at tcp://127.0.0.1:" in proc.stderr
    assert time.monotonic() - started < 30


def test_worker_without_environment_gets_clear_error():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETSTORM_")}
    proc = subprocess.run([sys.executable, "-c", "import mxnet as mx, netstorm; "
                           "mx.kv.create('netstorm')"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    assert "NETSTORM_SCHEDULER, NETSTORM_DC not set" in proc.stderr


@pytest.mark.parametrize("gated", [False, True], ids=["announced-ahead", "round-gate"])
def test_live_policy_switches_keep_sums_exact(manual, gated):
    """The scheduler announces a random policy every 0.3 s while workers run 150 rounds; every
    DC switches at the same round, and the fault worker checks every round's sum exactly.
    Announced ahead: each policy rides ahead of the rounds. Round gate (adapt, links declared
    so no start-up measurement): each policy starts at the first round not yet open, and
    servers start a round only once the scheduler opened it."""
    import re
    rounds = 150
    gate = dict(adapt=True, policy="fapt", links=tuple(
        Link(a, b, 100.0, 100.0) for a, b in (("dc0", "dc1"), ("dc1", "dc2"), ("dc0", "dc2"))))
    cluster = manual(dcs=3, workers_per_dc=1, heartbeat_s=0.1, **(gate if gated else {}))
    py = sys.executable
    cluster.start("scheduler", [py, "-m", "netstorm.scheduler", "--cluster", str(cluster.file),
                                "--switch-policy-every", "0.3", "--seed", "7"])
    for dc in cluster.config.dcs:
        cluster.start(f"server {dc.name}", cluster.server_argv(dc))
        cluster.start(f"worker {dc.name}/0", [py, str(WORKERS / "fault_worker.py"), "loop",
                                              str(rounds)], **worker_env(cluster.config, dc, 0),
                      NETSTORM_RUN_DIR=cluster.run_dir.name)
    for dc in cluster.config.dcs:
        code, out = cluster.wait(f"worker {dc.name}/0", timeout=180)
        assert code == 0 and f"finished {rounds} rounds" in out, out[-2000:]
    code, sched_out = cluster.wait("scheduler", timeout=30)
    assert code == 0, sched_out[-2000:]
    starts = [int(r) for r in re.findall(r"announced policy \d+ from round (\d+)", sched_out)]
    # several policies really took effect during the run, each at one boundary for all DCs
    assert len([r for r in starts if r <= rounds]) >= 3, sched_out[-2000:]
    for dc in cluster.config.dcs:
        code, out = cluster.wait(f"server {dc.name}", timeout=30)
        assert code == 0 and "policy 3 announced" in out, out[-2000:]


class _QueuedVan:
    """What the scheduler's loop uses of its Van, without sockets: ``messages`` already
    wait on the socket (``pending``); nothing is connected, so nothing is sent."""

    def __init__(self, messages):
        self.inbox, self.sent = list(messages), []

    def recv(self, timeout_s):
        return self.inbox.pop(0) if self.inbox else None

    def pending(self) -> bool:
        return bool(self.inbox)

    def is_connected(self, peer) -> bool:
        return False

    def send(self, peer, msg) -> None:
        self.sent.append((peer, msg))


def test_beats_queued_while_the_scheduler_was_busy_are_read_before_judging_liveness(
        monkeypatch):
    """A step that kept the scheduler's loop busy beyond dead_after_s (planning, or the
    machine under load) does not make the nodes look dead: the heartbeats that queued up
    meanwhile are read before liveness is judged. Socket-free: a clock the test moves."""
    import types

    from fakes import Clock
    from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
    from netstorm.scheduler import liveness, service
    clock = Clock(100.0)
    for module in (service, liveness):
        monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=clock))
    beat = [wire.Message(wire.Kind.HEARTBEAT, sender=n) for n in (1, 2, 3, 4)]
    van = _QueuedVan(beat + beat[:1] + [wire.Message(wire.Kind.BYE, sender=n)
                                        for n in (3, 4)])
    sched = service.Scheduler(pseudo_cluster(2, 1, free_port(), heartbeat_s=0.25,
                                             dead_after_s=2.0), van)
    sched.table = sched.liveness.table = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:1"),
                             NodeInfo(1, "server", "dc0", "tcp://127.0.0.1:2"),
                             NodeInfo(2, "server", "dc1", "tcp://127.0.0.1:3"),
                             NodeInfo(3, "worker", "dc0", "tcp://127.0.0.1:4", 0, 0),
                             NodeInfo(4, "worker", "dc1", "tcp://127.0.0.1:5", 1, 0)])
    sched.liveness.last_seen = dict.fromkeys((1, 2, 3, 4), clock.t)
    busy = iter([10.0])                 # the first step after a message: 5 x dead_after_s

    def adapt():
        clock.t += next(busy, 0.0)
    sched._adapt = adapt
    sched.serve()                       # no ClusterAborted naming a node
    assert sched.finished == {3, 4} and not van.inbox and not sched.lost.lost
