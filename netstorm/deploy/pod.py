"""What runs inside a pod of a Kubernetes deployment (:mod:`netstorm.deploy.kubernetes`),
besides the scheduler and the servers, which run as under the launcher.

    python -m netstorm.deploy.pod wait --timeout 600 NAME...
    python -m netstorm.deploy.pod worker --cluster F --dc eu --index 0 --host 10.4.0.7 \\
        [--reason-file PATH] [--as-dist-sync] -- python train.py

``wait`` (the pods' init container) returns once every host NAME resolves: every process
resolves the cluster file's names once, when it reads it, and a headless Service's name
resolves only once its pod exists. ``worker`` runs the training command as worker ``index``
of DC ``dc``, reached at ``host`` (its pod's address), with the environment the launcher
gives its workers (:func:`~netstorm.launcher.supervisor.worker_env`, from the same cluster
file) and under the launcher's own supervision: its output prefixed, a worker that exits 0
without having joined the cluster fails, and why it failed is written to ``--reason-file``
(Kubernetes' termination log). Bad arguments exit 2 with a line naming the flag.
"""
from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster
from netstorm.geoserver.config.exit_reasons import write_reason
from netstorm.geoserver.config.keys import SecurityError

__all__ = ["main", "wait_for_names", "worker_environment"]

POLL_S = 1.0


def wait_for_names(names, timeout_s: float, resolve=socket.getaddrinfo,
                   sleep=time.sleep, clock=time.monotonic) -> list:
    """Poll until every host name of ``names`` resolves, ``timeout_s`` at most; the names
    that still do not. O(names) per poll."""
    deadline = clock() + timeout_s
    missing = list(names)
    while True:
        still = []
        for name in missing:
            try:
                resolve(name, None, socket.AF_INET, socket.SOCK_STREAM)
            except (socket.gaierror, UnicodeError):
                still.append(name)
        missing = still
        if not missing or clock() >= deadline:
            return missing
        sleep(POLL_S)


def worker_environment(config, dc_name: str, index: int, host: str, run_dir: str,
                       as_dist_sync: bool) -> dict:
    """The variables worker ``index`` of ``dc_name`` runs with: the launcher's, but bound to
    and reached at ``host``. ClusterFileError for a DC or index the file does not have."""
    from netstorm.launcher.supervisor import child_env, worker_env   # noqa: PLC0415
    dc = config.dc(dc_name)
    if not 0 <= index < dc.workers:
        raise ClusterFileError(f"--index {index}: DC {dc_name!r} of {config.source} has "
                               f"{dc.workers} worker(s), 0..{dc.workers - 1}")
    env = worker_env(config, dc, index, as_dist_sync)
    reasons = Path(run_dir) / f"worker-{dc_name}-{index}"
    return child_env({**env, "NETSTORM_HOST": host, "NETSTORM_RUN_DIR": run_dir,
                      "NETSTORM_REASON_FILE": str(reasons),
                      "NETSTORM_JOINED_FILE": f"{reasons}.joined"})


def _run_worker(args) -> int:
    """Run the worker command under the launcher's supervision; its exit code."""
    from netstorm.launcher.processes import Launcher, interrupts_raise   # noqa: PLC0415
    config = load_cluster(args.cluster)
    with tempfile.TemporaryDirectory(prefix="netstorm-") as run_dir:
        env = worker_environment(config, args.dc, args.index, args.host, run_dir,
                                 args.as_dist_sync)
        launcher = Launcher()
        try:
            with interrupts_raise(), launcher:
                launcher.start(f"worker {args.dc}/{args.index}", "worker", args.command, env,
                               reason_file=env["NETSTORM_REASON_FILE"],
                               joined_file=env["NETSTORM_JOINED_FILE"])
                code = launcher.wait(1)
        except KeyboardInterrupt:
            code = 130
        if code:
            proc = launcher.procs[0]
            alone = proc.popen.returncode == 0 and proc.never_joined()
            reason = proc.reason()[0] or ("it exited with code 0 without joining the "
                                          "cluster" if alone else "")
            write_reason(args.reason_file, f"worker {args.dc}/{args.index} failed (exit "
                                           f"{code}){': ' + reason if reason else ''}")
        return code


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m netstorm.deploy.pod", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    wait = sub.add_parser("wait", help="wait until host names resolve")
    wait.add_argument("--timeout", type=float, default=600.0, help="seconds, at most")
    wait.add_argument("names", nargs="+", help="host names")
    worker = sub.add_parser("worker", help="run the training command as one worker")
    worker.add_argument("--cluster", required=True, help="cluster file (TOML)")
    worker.add_argument("--dc", required=True, help="this worker's DC")
    worker.add_argument("--index", required=True, type=int, help="its index in its DC")
    worker.add_argument("--host", required=True, help="its pod's address")
    worker.add_argument("--reason-file", default="", help="where to leave why it failed")
    worker.add_argument("--as-dist-sync", action="store_true",
                        help="MXNet's dist_sync names create netstorm's store")
    worker.add_argument("command", nargs=argparse.REMAINDER, help="-- the worker command")
    args = parser.parse_args(argv)
    if args.what == "wait" and not args.timeout >= 0:
        parser.error(f"--timeout must be a number of seconds >= 0, got {args.timeout}")
    if args.what == "worker":
        if args.command[:1] == ["--"]:
            args.command = args.command[1:]
        if not args.command:
            parser.error("give the worker command after --, e.g. -- python train.py")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.what == "wait":
        missing = wait_for_names(args.names, args.timeout)
        if missing:
            print(f"pod: after {args.timeout:g}s these names still do not resolve: "
                  f"{', '.join(missing)} (is every Service of the deployment applied, and "
                  f"its pod scheduled?)", file=sys.stderr)
            return 1
        return 0
    try:
        return _run_worker(args)
    except (ClusterFileError, SecurityError) as exc:
        print(f"pod: {exc}", file=sys.stderr)
        write_reason(args.reason_file, str(exc))
        return 2
    except Exception as exc:    # noqa: BLE001 - the edge: a line, never a traceback
        why = f"worker {args.dc}/{args.index} failed: {type(exc).__name__}: {exc}"
        print(f"pod: {why}", file=sys.stderr)
        write_reason(args.reason_file, why)
        return 1


if __name__ == "__main__":
    sys.exit(main())
