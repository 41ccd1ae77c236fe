#!/usr/bin/env python3
"""Start a netstorm cluster and run CMD on every worker.

    python scripts/launch.py --dcs 2 --workers-per-dc 2 -- python examples/train_gluon.py
    python scripts/launch.py --cluster my_cluster.toml -- python train.py --epochs 3

Starts the scheduler, one server per DC and every DC's workers (each running CMD with the
``kvstore`` package importable and NETSTORM_* variables telling it where the scheduler is).
Every output line is prefixed with its process's role. Exits non-zero if any process fails
and then stops every other process; Ctrl-C stops everything. With --dc, only those DCs'
processes (and the scheduler only with --scheduler) are started: one cluster file, one
launcher call per host.
"""
from __future__ import annotations

import argparse
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from geoserver.cluster import (ClusterConfig, ClusterFileError, DataCenter,  # noqa: E402
                               LinkSpec, load_cluster, pseudo_cluster, to_toml)

STOP_GRACE_S = 5.0
SHUTDOWN_GRACE_S = 15.0


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


class Launcher:
    """Owns the child processes of one cluster; always tears them all down."""

    def __init__(self, out=None):
        self.procs: list = []
        self.events: "queue.Queue" = queue.Queue()
        self.out = out or sys.stdout
        self._print_lock = threading.Lock()

    def _emit(self, prefix: str, line: str) -> None:
        with self._print_lock:
            self.out.write(f"[{prefix}] {line}")
            if not line.endswith("\n"):
                self.out.write("\n")
            self.out.flush()

    def _pump(self, proc: Proc) -> None:
        for raw in iter(proc.popen.stdout.readline, b""):
            self._emit(proc.name, raw.decode("utf-8", "replace"))
        self.events.put((proc, proc.popen.wait()))

    def start(self, name: str, role: str, argv: list, env: dict, wrap=None) -> Proc:
        full = (wrap or []) + argv
        popen = subprocess.Popen(full, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, cwd=os.getcwd())
        proc = Proc(name, role, popen)
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
        deadline = time.monotonic() + STOP_GRACE_S
        for p in live:
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
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
        theirs is never a failure.
        """
        workers_ok, pending = 0, {p.name for p in self.procs}
        while pending:
            timeout = SHUTDOWN_GRACE_S if workers_ok == workers_total else None
            try:
                proc, code = self.events.get(timeout=timeout)
            except queue.Empty:
                self._emit("launch", f"still running {SHUTDOWN_GRACE_S:g}s after the workers "
                                     f"finished: {', '.join(sorted(pending))}; stopping them")
                return 0
            pending.discard(proc.name)
            if code == 0:
                workers_ok += proc.role == "worker"
                continue
            what = (f"was killed by {signal.Signals(-code).name}" if code < 0
                    else f"exited with code {code}")
            self._emit("launch", f"{proc.name} {what}; stopping the cluster")
            return code if code > 0 else 1
        return 0


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
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}
    paths = [str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_cluster(config: ClusterConfig, command: list, dcs=None, with_scheduler=True,
                wrap_dc=None, out=None, python=sys.executable) -> int:
    """Run a whole cluster (or the named ``dcs`` of it) and ``command`` on its workers.

    ``wrap_dc(dc_name)`` may return a command prefix (e.g. ``ip netns exec NS``) for the
    processes of that DC. Returns the exit code; nothing is left running.
    """
    launcher = Launcher(out)
    wrap_dc = wrap_dc or (lambda _dc: [])
    chosen = [dc for dc in config.dcs if dcs is None or dc.name in dcs]
    with tempfile.TemporaryDirectory(prefix="netstorm-") as tmp:
        cluster_file = Path(tmp) / "cluster.toml"
        cluster_file.write_text(to_toml(config))
        base = child_env({})
        with launcher:
            if with_scheduler:
                launcher.start("scheduler", "scheduler",
                               [python, "-m", "scheduler", "--cluster", str(cluster_file)], base,
                               wrap_dc(config.hub_dc))
            for dc in chosen:
                launcher.start(f"server {dc.name}", "server",
                               [python, "-m", "geoserver", "--cluster", str(cluster_file),
                                "--dc", dc.name], base, wrap_dc(dc.name))
            for dc in chosen:
                for i in range(dc.workers):
                    env = child_env({"NETSTORM_SCHEDULER": config.scheduler_address,
                                     "NETSTORM_DC": dc.name, "NETSTORM_HOST": dc.host,
                                     "NETSTORM_LOCAL_INDEX": str(i),
                                     "NETSTORM_TIMEOUT_S": str(config.timeout_s)})
                    launcher.start(f"worker {dc.name}/{i}", "worker", command, env,
                                   wrap_dc(dc.name))
            started = time.monotonic()
            code = launcher.wait(sum(dc.workers for dc in chosen))
            status = "ok" if code == 0 else f"FAILED (exit {code})"
            launcher._emit("launch", f"{status}: {len(chosen)} DC(s), "
                                     f"{sum(dc.workers for dc in chosen)} worker(s), "
                                     f"{time.monotonic() - started:.1f}s")
            return code


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


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    shape = parser.add_mutually_exclusive_group(required=True)
    shape.add_argument("--dcs", type=int, help="number of DCs (pseudo-distributed)")
    shape.add_argument("--cluster", help="cluster file (TOML) for full control")
    shape.add_argument("--wan", help="topology (built-in name or file): run every DC in its "
                                     "own network namespace of an emulated WAN (needs root)")
    parser.add_argument("--bandwidth-scale", type=float, default=1.0,
                        help="with --wan: multiply every link rate")
    parser.add_argument("--policy", choices=["star", "fapt"], default=None,
                        help="WAN policy (default: the cluster file's, else star)")
    parser.add_argument("--adapt", action="store_true", default=None,
                        help="re-plan the trees from passively measured link rates")
    parser.add_argument("--multipath", action="store_true", default=None,
                        help="let idle links relay part of busy links' chunks")
    parser.add_argument("--stats", default=None,
                        help="the scheduler's JSON-lines log of estimates and policies")
    parser.add_argument("--measure", action="store_true",
                        help="with --wan: do not declare the links' rates; the cluster "
                             "measures them at start-up")
    parser.add_argument("--workers-per-dc", type=int, default=1)
    parser.add_argument("--chunk-bytes", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds any node waits for a peer before a clear error")
    parser.add_argument("--dc", action="append", default=None,
                        help="start only this DC's processes (repeatable; multi-host runs)")
    parser.add_argument("--scheduler", action=argparse.BooleanOptionalAction, default=None,
                        help="start the scheduler here (default: unless --dc is given)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- followed by the worker command")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("give the worker command after --, e.g. -- python train.py")
    return args


def run_on_wan(args, transport: dict) -> int:
    """Bring up the emulated WAN, run the cluster with each DC in its namespace (scheduler in
    the first DC), tear the WAN down whatever happens."""
    import wan as wanlib
    from scheduler.topology import TopologyError, load_topology
    try:
        topology = load_topology(args.wan).scaled(args.bandwidth_scale)
    except TopologyError as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return 2
    try:
        with wanlib.EmulatedWan(topology) as wan:
            first = topology.dcs[0]
            links = () if args.measure else tuple(
                LinkSpec(l.a, l.b, l.mbps_ab, l.mbps_ba) for l in topology.links)
            config = ClusterConfig(
                scheduler_host=wan.dc_address(first), scheduler_port=free_port(),
                dcs=tuple(DataCenter(dc, wan.dc_address(dc), 0, args.workers_per_dc)
                          for dc in topology.dcs), source=f"<wan {topology.name}>",
                links=links, **transport)
            return run_cluster(config, args.command, wrap_dc=wan.exec_prefix)
    except wanlib.WanUnavailable as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return 2


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    transport = {} if args.policy is None else {"policy": args.policy}
    if args.chunk_bytes is not None:
        transport["chunk_bytes"] = args.chunk_bytes
    if args.timeout is not None:
        transport["timeout_s"] = args.timeout
    for key in ("adapt", "multipath", "stats"):
        if getattr(args, key) is not None:
            transport[key] = getattr(args, key)
    try:
        if args.cluster:
            config = load_cluster(args.cluster)
            if transport:
                config = replace(config, **transport)
        elif args.wan:
            try:
                with interrupts_raise():
                    return run_on_wan(args, transport)
            except KeyboardInterrupt:
                return 130
        else:
            config = pseudo_cluster(args.dcs, args.workers_per_dc, free_port(), **transport)
        for name in args.dc or []:
            config.dc(name)
    except ClusterFileError as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return 2
    with_scheduler = args.scheduler if args.scheduler is not None else args.dc is None
    try:
        with interrupts_raise():
            return run_cluster(config, args.command, dcs=args.dc,
                               with_scheduler=with_scheduler)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
