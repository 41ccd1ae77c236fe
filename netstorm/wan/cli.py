"""An emulated WAN on this machine: one network namespace per DC, shaped veth links.

    python scripts/wan.py up small --scale 0.25          # prints the run id and DC addresses
    python scripts/wan.py status --run RUN                # JSON: rates, byte counters
    python scripts/wan.py set-rate --run RUN dc0 dc1 5    # dc0 -> dc1 now 5 Mbit/s
    python scripts/wan.py down --run RUN                  # or: down --all
    python scripts/wan.py run paper9 --trace paper9-fluctuating -- python bench.py

The library behind it is :mod:`netstorm.wan` (``emulator``, ``netns``, ``trace_runner``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import netstorm
from netstorm.geoserver.cli import StopSignals
from netstorm.geoserver.config.limits import flag_type
from netstorm.geoserver.config.uncaught import debug_wanted, report_uncaught
from netstorm.scheduler.topology import Topology, TopologyError

from .builtin import load_topology
from .emulator import EmulatedWan
from .netns import PREFIX, RUN_RE, STATE_DIR, WanError, down_all, list_netns, remove_namespaces
from .trace_runner import TraceRunner
from .traces import load_trace

__all__ = ["PROG", "main", "terminate_raises"]

PROG = "netstorm-wan"


def terminate_raises() -> StopSignals:
    """While inside, SIGTERM and SIGHUP raise :class:`Terminated` (a KeyboardInterrupt) in the
    main thread, so ``with`` blocks (and their ``down``) unwind as on Ctrl-C."""
    return StopSignals(signal.SIGTERM, signal.SIGHUP)


def _print_up(wan: EmulatedWan, out=sys.stdout) -> None:
    print(f"run {wan.run_id}: topology {wan.topology.name}, {len(wan.topology.dcs)} DCs, "
          f"{len(wan.topology.links)} links, state {wan.state_path}", file=out)
    for dc in wan.topology.dcs:
        print(f"  {dc:<8} {wan.dc_address(dc):<15} ip netns exec {wan.netns(dc)} ...", file=out)
    for l in wan.topology.links:
        print(f"  {l.a}-{l.b}: {l.mbps_ab:g} / {l.mbps_ba:g} Mbit/s", file=out)
    out.flush()


def _topology(args) -> Topology:
    topology = load_topology(args.topology)
    return topology.scaled(args.scale) if args.scale != 1.0 else topology


def _stop_child(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main(argv=None) -> int:
    """``netstorm-wan``: 0, CMD's status for ``run``, 2 for bad input or an unexpected error
    (one line; its traceback in a file, or printed with --debug or NETSTORM_DEBUG=1)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except Exception as exc:     # noqa: BLE001 - the last resort: one line, never a traceback
        return report_uncaught(PROG, exc, debug_wanted(argv, os.environ))


def _main(argv: list) -> int:
    parser = argparse.ArgumentParser(prog=PROG,
                                     description="\n\n".join(__doc__.split("\n\n")[:2]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", default=str(STATE_DIR), help=argparse.SUPPRESS)
    parser.add_argument("--version", action="version", version=f"{PROG} {netstorm.__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an unexpected error")
    sub = parser.add_subparsers(dest="command", required=True, help="what to do")
    for name in ("up", "run"):
        p = sub.add_parser(name, help="bring a WAN up" if name == "up" else
                           "bring a WAN up, run CMD (in the root namespace), always tear down")
        p.add_argument("topology", help="topology file or built-in name (small, hetero6, "
                                        "paper9)")
        p.add_argument("--run", help="run id (1-6 chars a-z0-9); default: random")
        p.add_argument("--scale", type=flag_type("scale"), default=1.0,
                       help="multiply every rate")
        p.add_argument("--prefix", default=PREFIX, help=argparse.SUPPRESS)
        if name == "run":
            p.add_argument("--trace", help="apply a named dynamic trace during CMD "
                                           "(paper9-fluctuating)")
            p.add_argument("--period", type=flag_type("timeout_s"), default=180.0,
                           help="trace period, s (default: the paper's 180)")
            p.usage = "wan.py run TOPOLOGY [--run ID] [--scale F] [--trace NAME] -- CMD ..."
    p = sub.add_parser("down", help="remove a run (or every run)")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--run", help="the run id to remove")
    group.add_argument("--all", action="store_true", help="remove every run of this prefix")
    p.add_argument("--prefix", default=PREFIX, help=argparse.SUPPRESS)
    p = sub.add_parser("status", help="JSON status of a run, or the list of runs")
    p.add_argument("--run", help="the run to describe (default: list the runs)")
    p = sub.add_parser("set-rate", help="change one direction's rate")
    p.add_argument("--run", required=True, help="the run id")
    p.add_argument("a", help="sending DC")
    p.add_argument("b", help="receiving DC")
    p.add_argument("mbps", type=flag_type("mbps"), help="new rate of a -> b, Mbit/s")
    cmd = []
    if "--" in argv:            # everything after the first -- is CMD, untouched by argparse
        cut = argv.index("--")
        argv, cmd = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    if cmd and args.command != "run":
        parser.error(f"only 'run' takes a command after --, not {args.command!r}")
    state_dir = Path(args.state_dir)

    try:
        if args.command == "up":
            wan = EmulatedWan(_topology(args), run_id=args.run, prefix=args.prefix,
                              state_dir=state_dir)
            with terminate_raises():
                wan.up()
            _print_up(wan)
        elif args.command == "run":
            if not cmd:
                parser.error("run needs a command after --")
            trace = load_trace(args.trace, period_s=args.period) if args.trace else None
            topology = _topology(args)
            if trace is not None:   # --scale applies to the trace's rates too
                trace = [(t, {pair: mbps * args.scale for pair, mbps in rates.items()})
                         for t, rates in trace]
                topology = topology.with_rates(trace[0][1])
            with terminate_raises(), \
                    EmulatedWan(topology, run_id=args.run, prefix=args.prefix,
                                state_dir=state_dir) as wan:
                _print_up(wan, out=sys.stderr)
                env = dict(os.environ, NETSTORM_WAN_RUN=wan.run_id,
                           NETSTORM_WAN_STATE=str(wan.state_path))
                runner = TraceRunner(wan, trace).start() if trace is not None else None
                child = subprocess.Popen(cmd, env=env)
                try:
                    code = child.wait()
                finally:
                    _stop_child(child)
                    if runner is not None:
                        runner.stop()
            return code
        elif args.command == "down":
            if args.all:
                runs = down_all(args.prefix, state_dir)
                print(f"removed runs: {' '.join(runs) or '(none)'}")
            else:
                path = state_dir / f"{args.run}.json"
                if path.exists():
                    EmulatedWan.attach(args.run, state_dir).down()
                else:   # no state file (e.g. removed by hand): go by namespace names
                    if not RUN_RE.match(args.run):
                        raise WanError(f"run id {args.run!r} must be 1-6 characters a-z or 0-9")
                    remove_namespaces([ns for ns in list_netns()
                                       if ns.startswith(f"{args.prefix}-{args.run}-")])
                print(f"removed run {args.run}")
        elif args.command == "status":
            if args.run:
                print(json.dumps(EmulatedWan.attach(args.run, state_dir).status(), indent=1))
            else:
                runs = {}
                for path in sorted(state_dir.glob("*.json")):
                    with contextlib.suppress(OSError, ValueError, KeyError):
                        state = json.loads(path.read_text())
                        runs[state["run"]] = {"topology": state["topology"]["name"],
                                              "phase": state["phase"], "pid": state["pid"],
                                              "dcs": state["dcs"]}
                print(json.dumps(runs, indent=1))
        elif args.command == "set-rate":
            EmulatedWan.attach(args.run, state_dir).set_rate(args.a, args.b, args.mbps)
    except (WanError, TopologyError) as exc:
        print(f"wan.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:     # Ctrl-C, or Terminated by SIGTERM or SIGHUP
        print(f"wan.py: interrupted{f' ({exc})' if str(exc) else ''}", file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    return 0


if __name__ == "__main__":
    sys.exit(main())
