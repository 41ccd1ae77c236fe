"""Start a netstorm cluster and run CMD on every worker.

    python scripts/launch.py --dcs 2 --workers-per-dc 2 -- python examples/train_gluon.py
    python scripts/launch.py --cluster my_cluster.toml -- python train.py --epochs 3

Starts the scheduler, one server per DC and every DC's workers (each running CMD with
NETSTORM_* variables telling it where the scheduler is; a Python CMD gets the installed
``netstorm`` imported before it starts, so it needs no ``import netstorm``, and with
--as-dist-sync MXNet's dist_sync names become netstorm's).
Every output line is prefixed with its process's role. Exits non-zero if any process fails
and then stops every other process; Ctrl-C stops everything. With --dc, only those DCs'
processes (and the scheduler only with --scheduler) are started, with --host only those the
file places on that host: one cluster file, one launcher call per host. With --ssh this
launcher starts every host's share itself, over ssh (docs/launch.md).

--log-level or --quiet sets how much every process says; with --log-dir DIR every line also
goes to its process's file in DIR (docs/operations.md).

Every flag is checked as the cluster file's field it sets is (``config.limits``), and the
cluster as a whole before any process starts: too many processes for this host's cores need
--yes. An unexpected error is one line (its traceback in a file, or printed with --debug).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import netstorm
from netstorm.geoserver.cli import LOG_LEVELS
from netstorm.geoserver.config.cluster import (ClusterConfig, ClusterFileError, DataCenter,
                                        load_cluster, pseudo_cluster)
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.compression import CompressionConfig, CompressionError
from netstorm.geoserver.config.status import StatusConfig
from netstorm.geoserver.config.sync import SyncConfig, SyncError
from netstorm.geoserver.config.keys import SecurityConfig
from netstorm.geoserver.config.metrics import MetricsConfig, MetricsError, parse_port
from netstorm.geoserver.config.limits import crowding, flag_type, node_count_problem, text_flag
from netstorm.geoserver.config.elastic import DcsRangeError, parse_dcs_range
from netstorm.geoserver.config.settings import DATAPLANES, DEFAULT_CHUNK_BYTES, \
    PROCESSES_PER_CORE
from netstorm.geoserver.config.uncaught import debug_wanted, report_uncaught

from netstorm.geoserver.config.hosts import resolve_host

from . import placement, preflight
from .logs import LogDirError, RunLog
from .placement import Part
from .slurm import run_in_allocation
from .ssh import run_over_ssh
from .supervisor import free_port, interrupts_raise, run_cluster

__all__ = ["OVERRIDES", "PROG", "compression_setting", "local_processes", "main",
           "on_host_part", "parse_args", "run_on_wan"]

PROG = "netstorm-launch"
OVERRIDES = {   # a cluster file's field -> the flag that overrides it
    "policy": "--policy", "chunk_bytes": "--chunk-bytes", "timeout_s": "--timeout",
    "dataplane": "--dataplane", "worker_restarts": "--worker-restarts", "resume": "--resume",
    "checkpoint": "--checkpoint", "cluster_restarts": "--cluster-restarts",
    "server_restarts": "--server-restarts", "scheduler_restarts": "--scheduler-restarts",
    "adapt": "--adapt", "multipath": "--multipath",
    "stats": "--stats", "security": "--insecure", "compression": "--compression",
    "sync": "--sync", "max_idle_s": "--max-idle", "metrics": "--metrics-port",
    "status": "--status-port/--total-steps", "audit_every": "--audit-every"}


def parse_args(argv):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    shape = parser.add_mutually_exclusive_group(required=True)
    shape.add_argument("--dcs", type=_dcs_flag,
                       help="number of DCs (pseudo-distributed); MIN:MAX: MAX DCs (those "
                            "of --join later) and the run goes on while MIN remain "
                            "([elastic] min_dcs, docs/recovery-elastic.md)")
    shape.add_argument("--cluster", type=text_flag,
                       help="cluster file (TOML) for full control")
    shape.add_argument("--wan", type=text_flag,
                       help="topology (built-in name or file): run every DC in its own "
                            "network namespace of an emulated WAN (needs root)")
    parser.add_argument("--bandwidth-scale", type=flag_type("scale"), default=1.0,
                        help="with --wan: multiply every link rate")
    parser.add_argument("--policy", choices=["star", "fapt"], default=None,
                        help="WAN policy (default: the cluster file's, else star)")
    parser.add_argument("--adapt", action="store_true", default=None,
                        help="re-plan the trees from passively measured link rates")
    parser.add_argument("--multipath", action="store_true", default=None,
                        help="let idle links relay part of busy links' chunks")
    parser.add_argument("--stats", type=text_flag, default=None,
                        help="the scheduler's JSON-lines log of estimates and policies")
    parser.add_argument("--metrics-port", type=_metrics_port, default=None, metavar="PORT",
                        help="the scheduler and every DC server serve Prometheus metrics "
                             "at /metrics: 0 (any free port), a port, or LOW-HIGH (each "
                             "takes the first free one); sets [metrics] port, bound to "
                             "[metrics] host (default 127.0.0.1)")
    parser.add_argument("--status-port", type=flag_type("status_port"), default=None,
                        help="the scheduler serves a live status page and /status.json at "
                             "this port ([status] port; on loopback unless the file's "
                             "[status] host says otherwise; docs/operations.md)")
    parser.add_argument("--total-steps", type=flag_type("status_total_steps"), default=None,
                        help="the script's optimizer steps in all ([status] total_steps): "
                             "progress and an ETA on the status page")
    parser.add_argument("--measure", action="store_true",
                        help="with --wan: do not declare the links' rates; the cluster "
                             "measures them at start-up")
    parser.add_argument("--compression", default=None,
                        help="gradient compression for the whole cluster: a type (fp16, bsc, "
                             "mpq, 2bit, int8, topk2bit) or MXNet's compression_params as JSON, e.g. "
                             "'{\"type\": \"bsc\", \"ratio\": 0.01}' (docs/compression.md); "
                             "overrides the cluster file's [compression]")
    parser.add_argument("--sync", default=None,
                        help="synchronization for the whole cluster: fsa, hfa:k1=4,k2=2, "
                             "mixed:staleness=2, esync:max_steps=8 or "
                             "diloco:h=100,outer_lr=0.7,fragments=4,delay=5 (docs/sync.md); "
                             "overrides the cluster file's [sync]")
    parser.add_argument("--workers-per-dc", type=flag_type("workers"), default=1,
                        help="workers per DC with --dcs or --wan (default 1)")
    parser.add_argument("--chunk-bytes", type=flag_type("chunk_bytes"), default=None,
                        help=f"WAN chunk size, bytes (pipelining granularity; default: the "
                             f"cluster file's, else {DEFAULT_CHUNK_BYTES})")
    parser.add_argument("--dataplane", choices=DATAPLANES, default=None,
                        help="the DC servers' WAN chunk path: the compiled core ('native'), "
                             "the Python one, or 'auto' (native where it is built and "
                             "applies; docs/dataplane.md); overrides [transport] dataplane")
    parser.add_argument("--timeout", type=flag_type("timeout_s"), default=None,
                        help="seconds any node waits for a peer before a clear error")
    parser.add_argument("--max-idle", type=flag_type("max_idle_s"), default=None,
                        metavar="SECONDS",
                        help="fail the run, naming it, when a worker sent nothing on the data "
                             "path for SECONDS while the others wait on it or have finished "
                             "(0: never, the default; overrides [transport] max_idle_s; "
                             "docs/operations.md)")
    parser.add_argument("--insecure", action="store_true",
                        help="no CURVE: traffic unencrypted and unauthenticated (a warning "
                             "is logged); by default the launcher makes throw-away keys "
                             "when the cluster file lists none")
    parser.add_argument("--as-dist-sync", action="store_true",
                        help="make MXNet's dist_sync / dist_device_sync / dist kvstore names "
                             "create netstorm's store in the workers, so a script written "
                             "for stock MXNet runs unedited (dist_async is refused)")
    parser.add_argument("--worker-restarts", type=flag_type("worker_restarts"), default=None,
                        help="restart a worker that dies up to N times into its rank; the "
                             "cluster waits for it (fsa only; docs/recovery.md)")
    parser.add_argument("--server-restarts", type=flag_type("server_restarts"), default=None,
                        help="replace a DC server that dies up to N times, from a peer DC's "
                             "replica, without stopping the others (fsa only; "
                             "docs/recovery.md)")
    parser.add_argument("--audit-every", type=flag_type("audit_every"), default=None,
                        help="every DC server digests its replica every N rounds and the "
                             "scheduler compares them (default 10, 0: off; "
                             "docs/recovery-audit.md)")
    parser.add_argument("--scheduler-restarts", type=flag_type("scheduler_restarts"),
                        default=None,
                        help="start a new scheduler up to N times when it dies; the nodes "
                             "keep training and re-register with it (docs/recovery.md)")
    parser.add_argument("--resume", type=text_flag, default=None,
                        help="start the servers from a checkpoint written by "
                             "kv.save_checkpoint (fsa only; docs/recovery.md)")
    parser.add_argument("--checkpoint", type=text_flag, default=None,
                        help="where kv.save_checkpoint() writes by default (fsa only)")
    parser.add_argument("--cluster-restarts", type=flag_type("cluster_restarts"), default=None,
                        help="with --checkpoint: restart the whole cluster from it up to N "
                             "times when a server or the scheduler dies (docs/recovery.md)")
    parser.add_argument("--join", type=text_flag, action="append", default=None,
                        metavar="DC", help="elastic ([elastic] min_dcs or --dcs MIN:MAX): "
                        "start this DC's server and workers --join-after seconds after "
                        "the others' workers joined, into the running cluster (repeatable)")
    parser.add_argument("--join-after", type=flag_type("join_after_s"), default=5.0,
                        metavar="S", help="seconds before --join DCs start (default 5)")
    parser.add_argument("--join-when", type=text_flag, default="", metavar="FILE",
                        help="--join DCs start (--join-after S) once FILE exists")
    parser.add_argument("--dc", type=text_flag, action="append", default=None,
                        help="start only this DC's processes (repeatable; multi-host runs)")
    parser.add_argument("--host", type=text_flag, default=None,
                        help="start only the processes the cluster file places on this "
                             "host address (its scheduler, servers and worker_hosts)")
    parser.add_argument("--ssh", action="store_true",
                        help="with --cluster: start every host's processes from here over "
                             "ssh (the file's [ssh] table says how; docs/launch.md)")
    parser.add_argument("--slurm", action="store_true",
                        help="inside an sbatch/salloc allocation: place the DCs on its nodes "
                             "and start each node's share with srun (docs/launch.md)")
    parser.add_argument("--check", action="store_true",
                        help="with --cluster: check the network without training (hosts "
                             "resolved and reached over ssh, fixed ports free and "
                             "reachable) and print the placement per host; exit 0 or 1")
    parser.add_argument("--scheduler", action=argparse.BooleanOptionalAction, default=None,
                        help="start the scheduler here (default: unless --dc is given)")
    parser.add_argument("--yes", action="store_true",
                        help=f"start more than {PROCESSES_PER_CORE} processes per core on "
                             f"this host")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an unexpected error")
    level = parser.add_mutually_exclusive_group()
    level.add_argument("--log-level", choices=list(LOG_LEVELS), default=None,
                       help="the lowest level every process logs (default: info)")
    level.add_argument("--quiet", action="store_true",
                       help="warnings and errors only: --log-level warning")
    parser.add_argument("--log-dir", type=text_flag, default=None,
                        help="also write every process's lines to its own file in this "
                             "folder (scheduler.log, server-DC.log, worker-DC-I.log, "
                             "launcher.log)")
    parser.add_argument("--version", action="version",
                        version=f"{PROG} {netstorm.__version__}")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- followed by the worker command")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if args.check and not args.cluster:
        parser.error("--check needs --cluster FILE: it checks the hosts the file names")
    if not args.command and not args.check:
        parser.error("give the worker command after --, e.g. -- python train.py")
    if args.ssh and not args.cluster:
        parser.error("--ssh needs --cluster FILE: the file says which host runs what")
    picks = [flag for flag, given in (("--ssh", args.ssh), ("--dc", args.dc),
                                      ("--host", args.host)) if given]
    if len(picks) > 1:
        parser.error(f"{' and '.join(picks)} exclude each other: --ssh starts every host, "
                     f"--dc or --host only this one's share")
    if args.join and (args.ssh or args.slurm or args.wan or args.host or args.dc):
        parser.error("--join starts DCs of a cluster this launcher runs whole on this "
                     "machine (--dcs MIN:MAX or --cluster); elsewhere start the joining DC's "
                     "share by itself: --cluster FILE --dc NAME")
    if args.slurm and (args.wan or args.ssh or args.host):
        parser.error("--slurm excludes --wan, --ssh and --host: Slurm's nodes say where")
    if (args.ssh or args.slurm) and (args.log_level or args.quiet):
        parser.error(f"{'--quiet' if args.quiet else '--log-level'} does not reach the hosts "
                     f"of {'--ssh' if args.ssh else '--slurm'} yet: their processes log at "
                     f"info (--log-dir works: one file per host)")
    args.log_level = "warning" if args.quiet else args.log_level or "info"
    low, args.dcs = args.dcs if args.dcs is not None else (None, None)
    args.min_dcs = low if low != args.dcs else None       # MIN:MAX: elastic
    return args


def _dcs_flag(text: str) -> tuple:
    """``--dcs``: ``N`` or ``MIN:MAX`` (:func:`parse_dcs_range`), each count within the
    bounds of ``dcs``; argparse names the flag."""
    try:
        low, high = parse_dcs_range(text)
    except DcsRangeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    count = flag_type("dcs")
    return count(str(low)), count(str(high))


def _metrics_port(text: str) -> tuple:
    """``--metrics-port``: checked as ``[metrics] port`` is (argparse names the flag)."""
    try:
        return parse_port(text)
    except MetricsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_on_wan(args, transport: dict, cores: int, out=None) -> int:
    """Bring up the emulated WAN, run the cluster with each DC in its namespace (scheduler in
    the first DC), tear the WAN down whatever happens. The cluster is checked (its settings,
    as its processes will read them, and its size for this host's ``cores``) before the WAN
    comes up. ``out``: the run's :class:`~.logs.RunLog` (or a stream)."""
    from netstorm import wan as wanlib   # noqa: PLC0415 - only --wan needs the emulator
    from netstorm.scheduler.topology import TopologyError  # noqa: PLC0415
    try:
        topology = wanlib.load_topology(args.wan).scaled(args.bandwidth_scale)
        links = () if args.measure else topology.without_latency().links

        def cluster(address) -> ClusterConfig:
            return ClusterConfig(
                scheduler_host=address(topology.dcs[0]), scheduler_port=free_port(),
                dcs=tuple(DataCenter(dc, address(dc), 0, args.workers_per_dc)
                          for dc in topology.dcs), source=f"<wan {topology.name}>",
                links=links, **transport)
        to_toml(_overridden(lambda: cluster(lambda dc: "127.0.0.1"), transport))
        _check_crowding(1 + len(topology.dcs) * (1 + args.workers_per_dc), cores, args.yes)
    except (TopologyError, ClusterFileError) as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return 2
    try:
        with wanlib.EmulatedWan(topology) as wan:
            return run_cluster(cluster(wan.dc_address), args.command, wrap_dc=wan.exec_prefix,
                               as_dist_sync=args.as_dist_sync, out=out)
    except (wanlib.WanUnavailable, ClusterFileError) as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return 2


def compression_setting(text: str) -> CompressionConfig:
    """``--compression``: a bare type name or a JSON object of compression_params."""
    if not text.lstrip().startswith("{"):
        return CompressionConfig.from_params({"type": text.strip()}, where="--compression")
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterFileError(f"--compression: not valid JSON ({exc})") from None
    return CompressionConfig.from_params(params, where="--compression")


def on_host_part(config: ClusterConfig, host: str) -> Part:
    """``--host``: what the file places on ``host`` (a name is resolved like the file's)."""
    address = resolve_host(host, "--host", ClusterFileError)
    part = placement.on_host(config, address)
    if part.empty:
        raise ClusterFileError(f"--host {host}: {config.source} places no process on "
                               f"{address}; its hosts are {', '.join(placement.hosts(config))}")
    return part


def _overrides(args) -> dict:
    """The cluster file's fields the flags set (:data:`OVERRIDES`), each already checked
    as that field is (argparse ``type=``); ``--compression`` and ``--sync`` parsed here."""
    transport = {} if args.policy is None else {"policy": args.policy}
    for key in ("chunk_bytes", "dataplane", "worker_restarts", "cluster_restarts",
                "server_restarts", "scheduler_restarts", "adapt", "multipath", "stats",
                "audit_every"):
        if getattr(args, key) is not None:
            transport[key] = getattr(args, key)
    if args.timeout is not None:
        transport["timeout_s"] = args.timeout
    if args.max_idle is not None:
        transport["max_idle_s"] = args.max_idle
    if getattr(args, "min_dcs", None) is not None:       # --dcs MIN:MAX
        transport["min_dcs"] = args.min_dcs
    for key in ("resume", "checkpoint"):
        if getattr(args, key) is not None:
            transport[key] = str(Path(getattr(args, key)).resolve())
    if args.insecure:
        transport["security"] = SecurityConfig(curve=False)
    if args.compression is not None:
        transport["compression"] = compression_setting(args.compression)
    if args.sync is not None:
        transport["sync"] = SyncConfig.parse(args.sync)
    if args.metrics_port is not None:
        transport["metrics"] = MetricsConfig(on=True, ports=args.metrics_port)
    if args.status_port is not None or args.total_steps is not None:
        transport["status"] = StatusConfig().overridden(args.status_port, args.total_steps)
    return transport


def _overridden(build, transport: dict) -> ClusterConfig:
    """``build()``, the cluster with the flags' ``transport`` applied; a refusal of the
    settings together (e.g. --timeout under two heartbeats) names the flags too."""
    try:
        return build()
    except ClusterFileError as exc:
        if not transport:
            raise
        flags = ", ".join(OVERRIDES[key] for key in transport)
        raise ClusterFileError(f"{exc} (with the command line's {flags})") from None


def _check_crowding(processes: int, cores: int, yes: bool) -> None:
    """Refuse to start ``processes`` on this host of ``cores`` cores if they are too many
    (``config.limits.crowding``), unless the user said ``--yes``."""
    problem = crowding(processes, cores)
    if problem and not yes:
        raise ClusterFileError(f"{problem}; pass --yes to start them anyway")


def local_processes(config: ClusterConfig, part, dcs, with_scheduler: bool) -> int:
    """How many processes this launcher starts here at once: ``part`` (``--host``), else
    the DCs ``dcs`` (None: all) and the scheduler if ``with_scheduler``."""
    if part is None:
        part = placement.of_dcs(config, dcs, with_scheduler)
    return int(part.scheduler) + len(part.servers) + len(part.workers)


def _cores() -> int:
    """The cores this process may run on (and so the processes it starts)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def main(argv=None) -> int:
    """``netstorm-launch``: exit status 0, the failing process's, 2 for bad input or an
    unexpected error (one line), 130 on Ctrl-C."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv, _cores())
    except Exception as exc:     # noqa: BLE001 - the last resort: one line, never a traceback
        return report_uncaught(PROG, exc, debug_wanted(argv, os.environ))


def _main(argv: list, cores: int) -> int:
    args = parse_args(argv)
    try:
        log = RunLog(sys.stdout, args.log_dir, args.log_level)
    except LogDirError as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return 2
    with log:
        return _run(args, cores, log)


def _run(args, cores: int, log: RunLog) -> int:
    """The launch ``args`` ask for on this host of ``cores`` cores, its lines to ``log``."""
    with_scheduler = args.scheduler if args.scheduler is not None else args.dc is None
    try:
        transport = _overrides(args)
        if args.wan:
            try:
                with interrupts_raise():
                    return run_on_wan(args, transport, cores, out=log)
            except KeyboardInterrupt:
                return 130
        if args.cluster:
            config = load_cluster(args.cluster)
            if "metrics" in transport:      # the flag's port; the file's [metrics] the rest
                transport["metrics"] = replace(config.metrics, on=True,
                                               ports=transport["metrics"].ports)
            if "status" in transport:       # the file's [status] host stays
                transport["status"] = config.status.overridden(args.status_port,
                                                               args.total_steps)
            if transport:
                config = _overridden(lambda: replace(config, **transport), transport)
        else:
            too_many = node_count_problem(args.dcs, args.dcs * args.workers_per_dc)
            if too_many:
                raise ClusterFileError(f"--dcs {args.dcs} --workers-per-dc "
                                       f"{args.workers_per_dc}: {too_many}")
            config = _overridden(lambda: pseudo_cluster(args.dcs, args.workers_per_dc,
                                                        free_port(), **transport), transport)
        for name in args.dc or []:
            config.dc(name)
        for name in args.join or []:        # elastic: DCs that join the running cluster
            config.dc(name)
            if not config.min_dcs:
                raise ClusterFileError(f"--join {name} needs an elastic cluster: --dcs "
                                       f"MIN:MAX or [elastic] min_dcs")
        part = None if args.host is None else on_host_part(config, args.host)
        if not args.ssh:
            _check_crowding(local_processes(config, part, args.dc, with_scheduler), cores,
                            args.yes)
    except (ClusterFileError, CompressionError, SyncError) as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return 2
    try:
        with interrupts_raise():
            if args.slurm:
                return run_in_allocation(config, args, out=log)
            if args.check:
                return preflight.check(config, use_ssh=args.ssh, out=log)
            if args.ssh:
                return run_over_ssh(config, args.command, as_dist_sync=args.as_dist_sync,
                                    out=log)
            return run_cluster(config, args.command, dcs=args.dc, part=part,
                               with_scheduler=with_scheduler, as_dist_sync=args.as_dist_sync,
                               out=log, join=args.join or (), join_after_s=args.join_after,
                               join_when=args.join_when)
    except ClusterFileError as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
