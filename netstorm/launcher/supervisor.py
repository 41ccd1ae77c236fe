"""Starting and supervising a cluster's processes: the scheduler, one server per DC, the
workers (or stock MXNet's ps-lite nodes, the benchmark's baseline).

:class:`~netstorm.launcher.processes.Launcher` owns the child processes: it prefixes every
output line with the process's role, reports the first failure and always stops every
process (SIGTERM, then SIGKILL to the process group). This module says what they are (their
command lines and environments, keys, the run's folder): :func:`run_cluster` runs a
netstorm cluster from a :class:`~netstorm.geoserver.config.cluster.ClusterConfig`;
:func:`run_pslite_cluster` the baseline.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import psutil

from netstorm.geoserver.model import checkpoint
from netstorm.geoserver.config.exit_reasons import STOP_NOTE
from netstorm.geoserver.config.cluster import ClusterConfig, ClusterFileError, absolute_paths
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.keys import SCHEDULER_PRINCIPAL, generate_cluster_keys, key_file_name
from netstorm.geoserver.core.van import MAX_IPC_PATH

from . import placement
from .logs import RunLog
from .placement import Part
from .processes import STOP_GRACE_S, Launcher, Proc, interrupts_raise, wait_for_exits

__all__ = ["BOOT_DIR", "Launcher", "Proc", "STOP_GRACE_S", "child_env", "free_port",
           "interrupts_raise", "is_local_address", "refuse_misplaced", "run_cluster",
           "run_pslite_cluster", "wait_for_exits", "with_keys", "worker_env"]

RUN_PATH_CHARS = 45     # /netstorm-XXXXXXXX (run) /netstorm-XXXXXXXX (node) /node.sock


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def child_env(extra: dict) -> dict:
    """This process's environment without ps-lite's ``DMLC_*`` variables (importing mxnet
    with ``DMLC_ROLE`` set would turn the child into a ps-lite node), unbuffered, plus
    ``extra``. Children import the installed ``netstorm`` package like any other."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def is_local_address(address: str) -> bool:
    """Whether ``address`` (an IP address, as the cluster file's are once read) is this
    machine's (of its network namespace): a loopback or wildcard address, or one of its
    interfaces' (read from them, not tried by binding, to which ``ip_nonlocal_bind`` would
    say yes for any). O(interfaces)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return True         # not an address: not this check's business (resolve_host's)
    if ip.is_loopback or ip.is_unspecified:     # 127.0.0.0/8, ::1; 0.0.0.0, ::
        return True
    return ip in {_ip(entry.address.split("%")[0])     # a link-local one has its %zone
                  for entries in psutil.net_if_addrs().values() for entry in entries}


def _ip(text: str):
    """``text`` as an IP address (compared as such: IPv6 has several spellings), or None
    (an interface's MAC address)."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def refuse_misplaced(config: ClusterConfig, part: Part, is_local=is_local_address) -> None:
    """:class:`ClusterFileError` naming every process of ``part`` (this launcher's share)
    that the file places on an address of another machine, and what to do, before any
    process starts (each would fail later, binding it). O(processes)."""
    wrong = placement.misplaced(config, part, is_local)
    if not wrong:
        return
    listed = "; ".join(f"{b.process} on {b.address} ({b.field})" for b in wrong[:4])
    if len(wrong) > 4:
        listed += f"; and {len(wrong) - 4} more"
    if part == placement.whole(config):
        fix = ("without --host, --dc or --ssh the launcher starts the whole cluster on this "
               "machine: start each host's share there (--host ADDRESS), or every host from "
               "here with --ssh (docs/launch.md)")
    else:
        fix = "run this launcher on the machine that has that address, or correct the file"
    raise ClusterFileError(f"{config.source} places {listed}, not an address of this "
                           f"machine; {fix}")


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
           "NETSTORM_HOST": dc.worker_bind(index), "NETSTORM_LOCAL_INDEX": str(index),
           "NETSTORM_ADVERTISE": dc.worker_host(index),
           "NETSTORM_WORKER_PORTS": "-".join(map(str, dc.worker_ports)),
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
                part: Part | None = None, started=None, follower_code: int = 0,
                join=(), join_after_s: float = 0.0, join_when: str = "") -> int:
    """Run a whole cluster (or the named ``dcs`` of it, or the ``part`` of it placed on one
    host) and ``command`` on its workers (with ``as_dist_sync``, MXNet's dist_sync names
    create netstorm's store in them).

    ``wrap_dc(dc_name)`` may return a command prefix (e.g. ``ip netns exec NS``) for the
    processes of that DC. Returns the exit code (``follower_code``, if given, when the
    failure only followed another node's); nothing is left running. ``started(launcher)``
    is called once every process started. A cluster file without keys gets throw-away keys
    (:func:`with_keys`); :class:`ClusterFileError` if it cannot, or if the file places one
    of these processes on another machine's address (:func:`refuse_misplaced`; not with
    ``wrap_dc``, whose processes run elsewhere). With ``[recovery]
    cluster_restarts`` (a whole cluster only), a lost server or scheduler restarts the
    cluster from its ``checkpoint`` file, if one was written (docs/recovery.md). ``out``:
    a :class:`~.logs.RunLog` (the console, the log files, every process's log level) or a
    stream (the console alone, level ``info``). ``join``: DCs (of an elastic cluster)
    started ``join_after_s`` after every other worker joined (and the file ``join_when``,
    if given, exists): they join the running cluster (docs/recovery-elastic.md).
    """
    out = out if isinstance(out, RunLog) else RunLog(out or sys.stdout)
    part = part or placement.of_dcs(config, dcs, with_scheduler)
    if wrap_dc is None:         # here, not in namespaces of an emulated WAN
        refuse_misplaced(config, part)
    wrap_dc = wrap_dc or (lambda _dc: [])
    restarts = config.cluster_restarts if part == placement.whole(config) else 0
    for attempt in range(1, restarts + 2):
        code, failed_role = _run_once(config, command, part, wrap_dc, out, python,
                                      as_dist_sync, started, follower_code,
                                      (tuple(join), join_after_s, join_when))
        if code == 0 or attempt > restarts or failed_role not in ("server", "scheduler"):
            return code
        try:
            done = checkpoint.read_header(config.checkpoint)["round"]
        except checkpoint.CheckpointError as exc:
            out.emit("launch", f"cannot restart the cluster: {exc}")
            return code
        out.emit("launch", f"restarting the whole cluster from {config.checkpoint} (round "
                           f"{done}; {attempt} of {restarts})")
        config = replace(config, resume=config.checkpoint)
    return code


def _run_once(config, command, part, wrap_dc, out: RunLog, python, as_dist_sync, started,
              follower_code, joining=((), 0.0, "")) -> tuple:
    """One run of :func:`run_cluster`: ``(exit code, role of the process that failed)``.
    Every process logs at ``out``'s level."""
    with tempfile.TemporaryDirectory(prefix="netstorm-", dir=_run_parent()) as tmp:
        launcher = Launcher(out, stop_note=str(Path(tmp) / STOP_NOTE),
                            worker_restarts=config.worker_restarts,
                            server_restarts=config.server_restarts,
                            scheduler_restarts=config.scheduler_restarts,
                            min_dcs=config.min_dcs, rejoins=config.rejoins)
        # relative paths of a cluster built here name files here, not in the folder the
        # file is written to (the processes read them relative to the file's folder)
        config = with_keys(absolute_paths(config, Path.cwd()), tmp,
                           part == placement.whole(config))
        cluster_file = Path(tmp) / "cluster.toml"
        cluster_file.write_text(to_toml(config))
        base = child_env({})
        reasons = Path(tmp) / "reasons"
        reasons.mkdir()
        with launcher:
            if part.scheduler:
                why = str(reasons / "scheduler")
                launcher.start("scheduler", "scheduler",
                               [python, "-P", "-m", "netstorm.scheduler", "--cluster",
                                str(cluster_file), "--reason-file", why,
                                *out.process_args()],
                               base, wrap_dc(config.hub_dc), reason_file=why)
            def start_dcs(names) -> None:
                for name in (n for n in part.servers if n in names):
                    why = str(reasons / f"server-{name}")
                    launcher.start(f"server {name}", "server",
                                   [python, "-P", "-m", "netstorm.geoserver", "--cluster",
                                    str(cluster_file), "--dc", name, "--run-dir", tmp,
                                    "--reason-file", why, *out.process_args()], base,
                                   wrap_dc(name), reason_file=why, dc=name)
                for name, i in (w for w in part.workers if w[0] in names):
                    why = str(reasons / f"worker-{name}-{i}")
                    joined = why + ".joined"
                    env = child_env({**worker_env(config, config.dc(name), i, as_dist_sync),
                                     **out.worker_env(),
                                     "NETSTORM_RUN_DIR": tmp,
                                     "NETSTORM_LAUNCHER_PYTHON": python,   # for the boot's
                                     "NETSTORM_LAUNCHER_PID": str(os.getpid()),  # checks
                                     "NETSTORM_REASON_FILE": why,
                                     "NETSTORM_JOINED_FILE": joined})
                    launcher.start(f"worker {name}/{i}", "worker", command, env,
                                   wrap_dc(name), reason_file=why, joined_file=joined,
                                   dc=name)
            later, join_after_s, join_when = joining
            start_dcs(({n for n, _ in part.workers} | set(part.servers)) - set(later))
            if later:       # elastic: they join the running cluster
                launcher.join_later(join_after_s, lambda: start_dcs(later), later, join_when)
            if started is not None:
                started(launcher)
            began = time.monotonic()
            code = launcher.wait(len(part.workers))
            if code and follower_code and launcher.failure_followed:
                code = follower_code
            status = "ok" if code == 0 else f"FAILED (exit {code})"
            say = out.info if code == 0 else out.emit       # --quiet drops the "ok"
            say("launch", f"{status}: {part.count()}, {time.monotonic() - began:.1f}s")
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
