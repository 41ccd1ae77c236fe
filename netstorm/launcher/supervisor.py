"""Starting and supervising a cluster's processes: the scheduler, one server per DC, the
workers (or stock MXNet's ps-lite nodes, the benchmark's baseline).

:class:`Launcher` owns the child processes: it prefixes every output line with the
process's role, reports the first failure and always stops every process (SIGTERM, then
SIGKILL to the process group). :func:`run_cluster` runs a netstorm cluster from a
:class:`~netstorm.geoserver.config.cluster.ClusterConfig`; :func:`run_pslite_cluster` the baseline.
"""
from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from netstorm.geoserver.model import checkpoint
from netstorm.geoserver.config.exit_reasons import EXIT_ABORTED, STOP_NOTE, read_reason, write_reason
from netstorm.geoserver.config.cluster import ClusterConfig, ClusterFileError
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.keys import SCHEDULER_PRINCIPAL, generate_cluster_keys, key_file_name
from netstorm.geoserver.core.van import MAX_IPC_PATH

from . import placement
from .placement import Part

STOP_GRACE_S = 5.0
SHUTDOWN_GRACE_S = 15.0
BLAME_GRACE_S = 5.0     # after a node stopped because another failed: wait for that one
REASON_SHOWN = 400      # characters of a failed process's reason in the failure line
LAUNCH_PREFIX = "[launch] "             # the launcher's own lines
FAILURE_END = "; stopping the cluster"  # ends the launcher's line naming the failure
RUN_PATH_CHARS = 45     # /netstorm-XXXXXXXX (run) /netstorm-XXXXXXXX (node) /node.sock


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class Proc:
    name: str
    role: str
    popen: subprocess.Popen
    reader: threading.Thread | None = None
    reason_file: str = ""       # where the process leaves why it failed (netstorm's own)
    joined_file: str = ""       # a worker creates it once it joined the cluster ("": unchecked)
    said: str = ""              # a host's (``--ssh``): its launcher's failure, else last line
    start: tuple = ()           # how it was started (argv, env, wrap): to restart a worker
    restarts: int = 0           # how often it was restarted

    def reason(self) -> tuple:
        """``(why it failed in its own words, first line, or "", whether it failed because
        another node did)``."""
        if self.role == "host":
            return self.said.removesuffix(FAILURE_END)[:REASON_SHOWN], False
        text, caused_by_other = read_reason(self.reason_file)
        first = text.strip().splitlines()[0][:REASON_SHOWN] if text.strip() else ""
        return first, caused_by_other

    def never_joined(self) -> bool:
        """A worker that was to join the cluster and did not (it never created the store)."""
        return bool(self.joined_file) and not Path(self.joined_file).exists()

    def follows(self, code: int) -> bool:
        """Whether this failure was caused by another node's (its exit code or its
        reason file says so): the launcher then looks for that node first."""
        return code == EXIT_ABORTED and self.role != "worker" or self.reason()[1]


class Launcher:
    """Owns the child processes of one cluster; always tears them all down."""

    def __init__(self, out=None, stop_note: str = "", worker_restarts: int = 0,
                 server_restarts: int = 0):
        """``stop_note``: a file where the launcher writes why it stops the cluster before
        it signals the processes (a server passes that on to the scheduler, so the other
        hosts learn which node failed, not that a bystander was stopped).
        ``worker_restarts``: how often a failed worker is started again into its rank;
        ``server_restarts``: how often a failed DC server is started again (it takes a
        peer DC's replica)."""
        self.restarts = {"worker": worker_restarts, "server": server_restarts}
        self.procs: list = []
        self.events: "queue.Queue" = queue.Queue()
        self.out = out or sys.stdout
        self.stop_note = stop_note
        self.failure_followed = False   # the failure reported followed another node's
        self.failed_role = ""           # the role of the process whose failure is reported
        self._print_lock = threading.Lock()

    def _emit(self, prefix: str, line: str) -> None:
        with self._print_lock:
            self.out.write(f"[{prefix}] {line}")
            if not line.endswith("\n"):
                self.out.write("\n")
            self.out.flush()

    def _pump(self, proc: Proc) -> None:
        for raw in iter(proc.popen.stdout.readline, b""):
            line = raw.decode("utf-8", "replace")
            self._emit(proc.name, line)
            if proc.role == "host" and line.strip() and not proc.said.endswith(FAILURE_END):
                proc.said = line.strip().removeprefix(LAUNCH_PREFIX)
        self.events.put((proc, proc.popen.wait()))

    def start(self, name: str, role: str, argv: list, env: dict, wrap=None,
              reason_file: str = "", joined_file: str = "", stdin_data: bytes = b"") -> Proc:
        """Start ``argv`` (after ``wrap``) as process ``name``; ``stdin_data``, if any, is
        written to its standard input, which stays open (closing it is how
        :class:`~netstorm.launcher.ssh.SshLauncher` stops a remote host)."""
        full = (wrap or []) + argv
        popen = subprocess.Popen(full, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT,
                                 stdin=subprocess.PIPE if stdin_data else subprocess.DEVNULL,
                                 start_new_session=True, cwd=os.getcwd())
        if stdin_data:
            try:
                popen.stdin.write(stdin_data)
                popen.stdin.flush()
            except BrokenPipeError:     # it exited at once (ssh: host unreachable); its
                pass                    # exit code and output tell why
        proc = Proc(name, role, popen, reason_file=reason_file, joined_file=joined_file,
                    start=(argv, env, wrap))
        proc.reader = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        proc.reader.start()
        self.procs.append(proc)
        return proc

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, _tb):
        """Always stop every process; an interrupt is reported and propagates."""
        if exc_type is KeyboardInterrupt:
            self._emit("launch", f"interrupted ({exc or 'SIGINT'}); stopping the cluster")
        self.stop_all()
        return False

    def stop_all(self) -> None:
        """SIGTERM every live process group, SIGKILL what remains after a grace period."""
        live = [p for p in self.procs if p.popen.poll() is None]
        for p in live:
            _signal_group(p.popen, signal.SIGTERM)
        wait_for_exits(live, STOP_GRACE_S)
        for p in self.procs:
            _signal_group(p.popen, signal.SIGKILL)  # also reaps grandchildren left behind
            try:
                p.popen.wait(2)
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            if p.reader is not None:
                p.reader.join(timeout=2)

    def wait(self, workers_total: int) -> int:
        """Block until the workers finish; return the cluster's exit code.

        A worker's non-zero exit, or any server/scheduler failure, stops the cluster. Servers
        and the scheduler exit 0 only after every worker said goodbye, so a clean exit of
        theirs is never a failure. The failure named is the first that was not a node
        stopping because *another* failed (:meth:`Proc.follows`): after such an exit the
        launcher waits up to :data:`BLAME_GRACE_S` for the node that caused it.
        """
        workers_ok, pending = 0, {p.name for p in self.procs}
        followers, blame_by = [], None      # failures caused by another node's
        while pending:
            timeout = SHUTDOWN_GRACE_S if workers_total and workers_ok == workers_total \
                else None
            if blame_by is not None:
                timeout = max(0.0, blame_by - time.monotonic())
            try:
                proc, code = self.events.get(timeout=timeout)
            except queue.Empty:
                if followers:                   # the cause is not among these processes
                    return self._failed(*_most_direct(followers))
                self._emit("launch", f"still running {SHUTDOWN_GRACE_S:g}s after the workers "
                                     f"finished: {', '.join(sorted(pending))}; stopping them")
                return 0
            pending.discard(proc.name)
            if code == 0 and proc.never_joined():
                return self._never_joined(proc)
            if code == 0:
                workers_ok += proc.role == "worker"
                continue
            if proc.restarts < self.restarts.get(proc.role, 0) and not proc.follows(code):
                pending.add(self._restart(proc, code).name)
                continue
            if proc.follows(code):
                followers.append((proc, code))
                blame_by = blame_by or time.monotonic() + BLAME_GRACE_S
                continue
            return self._failed(proc, code)
        return self._failed(*_most_direct(followers)) if followers else 0

    def _restart(self, proc: Proc, code: int) -> Proc:
        """Start a failed worker again, into its rank, or a failed server, which takes a
        peer DC's replica: the scheduler waits for it (docs/recovery.md). Its reason file
        is cleared; the dead process is forgotten."""
        how = "restarting it into its rank" if proc.role == "worker" else \
            "replacing it from a peer DC's replica"
        self._emit("launch", f"{proc.name} {_exit_words(code)}; {how} "
                             f"({proc.restarts + 1} of {self.restarts[proc.role]})")
        with contextlib.suppress(OSError):
            os.unlink(proc.reason_file)
        self.procs.remove(proc)
        argv, env, wrap = proc.start
        new = self.start(proc.name, proc.role, argv, env, wrap, reason_file=proc.reason_file,
                         joined_file=proc.joined_file)
        new.restarts = proc.restarts + 1
        return new

    def _never_joined(self, proc: Proc) -> int:
        """A worker finished "successfully" without ever joining: it trained alone. The
        worst a distributed launcher can do is call that a success."""
        self._emit("launch", f"{proc.name} exited with code 0 without joining the cluster: it "
                             f"never created the 'netstorm' kvstore, so it trained alone (is "
                             f"the store's name spelled 'netstorm' in mx.kv.create, "
                             f"gluon.Trainer or Module.fit? a script written for MXNet's "
                             f"dist_sync needs --as-dist-sync); stopping the cluster")
        return 1

    def _failed(self, proc: Proc, code: int) -> int:
        what = _exit_words(code)
        reason = proc.reason()[0]
        if reason:
            what += f": {reason}"
        elif code == EXIT_ABORTED and proc.role != "worker":
            what += " (the cluster was aborted: the reason above names the node)"
        self._emit("launch", f"{proc.name} {what}{FAILURE_END}")
        self.note_stop(f"{proc.name} {what}")
        self.failure_followed = bool(proc.follows(code))
        self.failed_role = proc.role
        return code if code > 0 else 1

    def note_stop(self, reason: str) -> None:
        """Leave why the cluster stops where its servers look before they are signalled."""
        if self.stop_note:
            write_reason(self.stop_note, reason)


def _exit_words(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else \
        f"exited with code {code}"


def wait_for_exits(procs, seconds: float) -> None:
    """Until every one of ``procs`` exited, ``seconds`` at most in all."""
    deadline = time.monotonic() + seconds
    for p in procs:
        try:
            p.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _most_direct(followers: list) -> tuple:
    """Of failures that all followed another node's, the one whose reason names the cause
    most directly: a worker's (it says what it waited for), else the first."""
    return next((f for f in followers if f[0].role == "worker"), followers[0])


@contextlib.contextmanager
def interrupts_raise():
    """Within the block, SIGINT and SIGTERM raise KeyboardInterrupt (so clean-up runs)."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for s in previous:
        signal.signal(s, interrupted)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _signal_group(popen, sig) -> None:
    try:
        os.killpg(popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def child_env(extra: dict) -> dict:
    """This process's environment without ps-lite's ``DMLC_*`` variables (importing mxnet
    with ``DMLC_ROLE`` set would turn the child into a ps-lite node), unbuffered, plus
    ``extra``. Children import the installed ``netstorm`` package like any other."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def with_keys(config: ClusterConfig, folder, whole_cluster: bool) -> ClusterConfig:
    """``config`` with CURVE keys. A file that lists none gets throw-away keys in ``folder``
    when this launcher starts the ``whole_cluster`` (they never leave this machine and die
    with the run); starting part of a cluster needs keys every host shares."""
    if not config.security.curve or config.security.keys:
        return config
    if not whole_cluster:
        raise ClusterFileError(
            f"{config.source} lists no keys, and this launcher starts only part of the "
            f"cluster: make keys once with 'netstorm-keygen {config.source}', give every "
            f"host the file and its DC's secret key, or set [security] curve = false")
    keys = generate_cluster_keys([dc.name for dc in config.dcs], Path(folder) / "keys")
    return replace(config, security=keys)


def _run_parent():
    """Where a run's folder goes: the temporary folder, or /tmp when paths there would be
    too long for the Unix sockets the run's processes make in it (the run's folder, with
    everything in it, is removed at the end even if a process was killed)."""
    return None if len(tempfile.gettempdir()) + RUN_PATH_CHARS <= MAX_IPC_PATH else "/tmp"


BOOT_DIR = Path(__file__).resolve().parent / "boot"   # sitecustomize.py for the workers


def worker_env(config: ClusterConfig, dc, index: int, as_dist_sync: bool = False) -> dict:
    """What a worker of ``dc`` is told: the scheduler, its DC, its key (or that there is
    none); and, through ``boot/sitecustomize.py`` first on its ``PYTHONPATH``, to import
    netstorm (and with ``as_dist_sync`` to make MXNet's dist_sync names netstorm's)."""
    path = os.environ.get("PYTHONPATH", "")
    env = {"NETSTORM_SCHEDULER": config.scheduler_address, "NETSTORM_DC": dc.name,
           "NETSTORM_HOST": dc.worker_host(index), "NETSTORM_LOCAL_INDEX": str(index),
           "NETSTORM_TIMEOUT_S": str(config.timeout_s),
           "PYTHONPATH": str(BOOT_DIR) + (os.pathsep + path if path else "")}
    if as_dist_sync:
        env["NETSTORM_AS_DIST_SYNC"] = "1"
    security = config.security
    if not security.curve:
        env["NETSTORM_INSECURE"] = "1"
    else:
        env["NETSTORM_KEY_FILE"] = str(Path(security.secret_keys) / key_file_name(dc.name))
        env["NETSTORM_SCHEDULER_KEY"] = security.keys[SCHEDULER_PRINCIPAL]
    return env


def run_cluster(config: ClusterConfig, command: list, dcs=None, with_scheduler=True,
                wrap_dc=None, out=None, python=sys.executable, as_dist_sync=False,
                part: Part | None = None, started=None, follower_code: int = 0) -> int:
    """Run a whole cluster (or the named ``dcs`` of it, or the ``part`` of it placed on one
    host) and ``command`` on its workers (with ``as_dist_sync``, MXNet's dist_sync names
    create netstorm's store in them).

    ``wrap_dc(dc_name)`` may return a command prefix (e.g. ``ip netns exec NS``) for the
    processes of that DC. Returns the exit code (``follower_code``, if given, when the
    failure only followed another node's); nothing is left running. ``started(launcher)``
    is called once every process started. A cluster file without keys gets throw-away keys
    (:func:`with_keys`); :class:`ClusterFileError` if it cannot. With ``[recovery]
    cluster_restarts`` (a whole cluster only), a lost server or scheduler restarts the
    cluster from its ``checkpoint`` file, if one was written (docs/recovery.md).
    """
    wrap_dc = wrap_dc or (lambda _dc: [])
    part = part or placement.of_dcs(config, dcs, with_scheduler)
    restarts = config.cluster_restarts if part == placement.whole(config) else 0
    for attempt in range(1, restarts + 2):
        code, failed_role = _run_once(config, command, part, wrap_dc, out, python,
                                      as_dist_sync, started, follower_code)
        if code == 0 or attempt > restarts or failed_role not in ("server", "scheduler"):
            return code
        try:
            done = checkpoint.read_header(config.checkpoint)["round"]
        except checkpoint.CheckpointError as exc:
            print(f"[launch] cannot restart the cluster: {exc}", file=out or sys.stdout,
                  flush=True)
            return code
        print(f"[launch] restarting the whole cluster from {config.checkpoint} (round "
              f"{done}; {attempt} of {restarts})", file=out or sys.stdout, flush=True)
        config = replace(config, resume=config.checkpoint)
    return code


def _run_once(config, command, part, wrap_dc, out, python, as_dist_sync, started,
              follower_code) -> tuple:
    """One run of :func:`run_cluster`: ``(exit code, role of the process that failed)``."""
    with tempfile.TemporaryDirectory(prefix="netstorm-", dir=_run_parent()) as tmp:
        launcher = Launcher(out, stop_note=str(Path(tmp) / STOP_NOTE),
                            worker_restarts=config.worker_restarts,
                            server_restarts=config.server_restarts)
        config = with_keys(config, tmp, part == placement.whole(config))
        cluster_file = Path(tmp) / "cluster.toml"
        cluster_file.write_text(to_toml(config))
        base = child_env({})
        reasons = Path(tmp) / "reasons"
        reasons.mkdir()
        with launcher:
            if part.scheduler:
                why = str(reasons / "scheduler")
                launcher.start("scheduler", "scheduler",
                               [python, "-m", "netstorm.scheduler", "--cluster",
                                str(cluster_file), "--reason-file", why],
                               base, wrap_dc(config.hub_dc), reason_file=why)
            for name in part.servers:
                why = str(reasons / f"server-{name}")
                launcher.start(f"server {name}", "server",
                               [python, "-m", "netstorm.geoserver", "--cluster", str(cluster_file),
                                "--dc", name, "--run-dir", tmp, "--reason-file", why], base,
                               wrap_dc(name), reason_file=why)
            for name, i in part.workers:
                why = str(reasons / f"worker-{name}-{i}")
                joined = why + ".joined"
                env = child_env({**worker_env(config, config.dc(name), i, as_dist_sync),
                                 "NETSTORM_RUN_DIR": tmp,
                                 "NETSTORM_REASON_FILE": why,
                                 "NETSTORM_JOINED_FILE": joined})
                launcher.start(f"worker {name}/{i}", "worker", command, env,
                               wrap_dc(name), reason_file=why, joined_file=joined)
            if started is not None:
                started(launcher)
            began = time.monotonic()
            code = launcher.wait(len(part.workers))
            if code and follower_code and launcher.failure_followed:
                code = follower_code
            status = "ok" if code == 0 else f"FAILED (exit {code})"
            launcher._emit("launch", f"{status}: {part.count()}, "
                                     f"{time.monotonic() - began:.1f}s")
            return code, launcher.failed_role


def run_pslite_cluster(server_dcs: list, worker_dcs: list, workers_per_dc: int, command: list,
                       address=lambda dc: "127.0.0.1", wrap_dc=None, out=None,
                       python=sys.executable, extra_env=None) -> int:
    """Stock MXNet ``dist_sync`` (ps-lite), the baseline: a scheduler and one server in each
    of ``server_dcs`` (the scheduler beside the first), ``workers_per_dc`` workers in each of
    ``worker_dcs``. Only these processes set DMLC_ROLE; importing mxnet with it set turns a
    process into a ps-lite node (MXNet's own tools/launch.py is broken on Python 3.11)."""
    launcher = Launcher(out)
    wrap_dc = wrap_dc or (lambda _dc: [])
    root_dc = server_dcs[0]
    common = {"DMLC_PS_ROOT_URI": address(root_dc), "DMLC_PS_ROOT_PORT": str(free_port()),
              "DMLC_NUM_SERVER": str(len(server_dcs)),
              "DMLC_NUM_WORKER": str(len(worker_dcs) * workers_per_dc), "PS_VERBOSE": "0",
              **(extra_env or {})}
    node = [python, "-c", "import mxnet"]     # the import runs the ps-lite node, then exits
    with launcher:
        launcher.start("ps scheduler", "scheduler", node,
                       child_env({**common, "DMLC_ROLE": "scheduler",
                                  "DMLC_NODE_HOST": address(root_dc)}), wrap_dc(root_dc))
        for dc in server_dcs:
            launcher.start(f"ps server {dc}", "server", node,
                           child_env({**common, "DMLC_ROLE": "server",
                                      "DMLC_NODE_HOST": address(dc)}), wrap_dc(dc))
        for dc in worker_dcs:
            for i in range(workers_per_dc):
                launcher.start(f"worker {dc}/{i}", "worker", command,
                               child_env({**common, "DMLC_ROLE": "worker",
                                          "DMLC_NODE_HOST": address(dc)}), wrap_dc(dc))
        return launcher.wait(len(worker_dcs) * workers_per_dc)
