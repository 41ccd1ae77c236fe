"""One DC server's aggregation throughput, beside a ps-lite server doing the same work.

    python scripts/server_throughput.py --workers 2 --iters 10

On loopback, no WAN: W workers on this host push and pull every parameter of a gluon
model_zoo model (comm mode of :mod:`netstorm.bench.worker`: gradient-shaped arrays of known
values, every result checked) through one server. ``pslite`` is stock MXNet ``dist_sync``
with one server; ``netstorm`` is one DC whose server aggregates its W workers (the workers
reach it over its ``ipc://`` endpoint, as they do when they share its host). The server
takes in W model copies and gives out W per iteration, so its throughput is
2·W·(model bytes) / (iteration time), in GB/s; beside it, the CPU seconds every role spent
per GB of it (:mod:`netstorm.bench.cpu`), over the measured iterations only.

Both run one after the other in one invocation, on the same machine state, and the ratio is
printed. No root and no namespaces are needed.

With ``--wan-dcs N`` it measures the WAN hop instead: each of N DC servers' CPU seconds per
WAN GB, per ``[transport] dataplane`` (:mod:`netstorm.bench.wan_throughput`).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from netstorm.geoserver.config.cluster import ClusterConfig, DataCenter
from netstorm.launcher import free_port, interrupts_raise, run_cluster, run_pslite_cluster

from . import perf_profile
from .cli import Progress
from .cpu import RoleCpu, cpu_by_role, describe, measured_window
from .measure import collect

__all__ = ["SYSTEMS", "main", "measure", "run_system", "table"]

SYSTEMS = ("pslite", "netstorm")


def _command(out: Path, model: str, iters: int, kvstore: str) -> list:
    return [sys.executable, "-P", "-m", "netstorm.bench.worker", "--kvstore", kvstore,
            "--model", model, "--mode", "comm", "--iters", str(iters), "--out", str(out)]


def run_system(name: str, workers: int, model: str, iters: int, out: Path, log) -> int:
    out.mkdir(parents=True, exist_ok=True)
    if name == "pslite":
        return run_pslite_cluster(["dc0"], ["dc0"], workers,
                                  _command(out, model, iters, "dist_sync"), out=log)
    config = ClusterConfig(scheduler_host="127.0.0.1", scheduler_port=free_port(),
                           dcs=(DataCenter("dc0", "127.0.0.1", 0, workers),),
                           policy="star", hub="dc0", timeout_s=600.0)
    return run_cluster(config, _command(out, model, iters, "netstorm"), out=log)


def measure(systems, workers: int, model: str, iters: int, logs: Path,
            perf: bool = False) -> dict:
    """Run each system; its figures (see the module doc), keyed by name. ``perf``: also
    where the machine's CPU went (:mod:`netstorm.bench.perf_profile`)."""
    results = {}
    for name in systems:
        recorder = perf_profile.Recorder(logs / f"{name}.perf.data") if perf else None
        with open(logs / f"{name}.log", "w") as log, RoleCpu() as roles:
            print(f"throughput: running {name} ...", flush=True)
            try:
                code = run_system(name, workers, model, iters, logs / name,
                                  Progress(log, name, recorder and recorder.start))
            finally:
                recorded = recorder is not None and recorder.stop()
        r = collect(logs / name, "comm")
        if code != 0 or not r.get("iter_s"):
            results[name] = {"correct": False, "exit_code": code,
                             "error": f"see {logs / (name + '.log')}"}
            continue
        moved = 2 * workers * r["model_bytes"]
        r.update(cpu_by_role(roles, r, iters))
        if recorded:        # the measured iterations only, as r["cpu"]
            r["cpu_profile"] = perf_profile.cpu_profile(recorder.path, measured_window(r),
                                                        r["cpu"]["machine_s"])
        r.pop("_iter_start", None)
        r.pop("_iter_all_s", None)
        r.update(exit_code=code, gb_per_s=round(moved / r["median_s"] / 1e9, 3),
                 cpu_s_per_gb=round(r["cpu"]["total_s"] / (moved / 1e9), 3))
        results[name] = r
    return results


def table(results: dict, workers: int, model: str) -> str:
    lines = [f"one server, {workers} workers on loopback, {model} per iteration",
             f"{'system':<10}{'median s':>10}{'GB/s':>8}{'CPU-s/GB':>10}{'correct':>9}  "
             f"CPU-s per iteration"]
    for name, r in results.items():
        if "gb_per_s" not in r:
            lines.append(f"{name:<10}{'-':>10}{'-':>8}{'-':>10}{'NO':>9}  {r.get('error')}")
            continue
        lines.append(f"{name:<10}{r['median_s']:>10.3f}{r['gb_per_s']:>8.2f}"
                     f"{r['cpu_s_per_gb']:>10.2f}{'yes' if r['correct'] else 'NO':>9}  "
                     f"{describe(r['cpu'])}")
    for name, r in results.items():
        if r.get("cpu_profile"):
            lines.append(f"{name} where the CPU went (perf, CPU-s/iter): "
                         f"{perf_profile.describe(r['cpu_profile']['cpu_s_per_iter'])}")
    if all("gb_per_s" in results.get(s, {}) for s in SYSTEMS):
        lines.append(f"netstorm / pslite throughput: "
                     f"{results['netstorm']['gb_per_s'] / results['pslite']['gb_per_s']:.2f}x")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=None,
                   help="workers pushing to the one server (default 2)")
    p.add_argument("--model", default="resnet18_v1", help="gluon model_zoo name")
    p.add_argument("--iters", type=int, default=10, help="measured iterations (+1 warm-up)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated, from: {', '.join(SYSTEMS)}")
    p.add_argument("--perf", action="store_true",
                   help="also sample the machine with Linux perf and say where the CPU went")
    p.add_argument("--json", help="write every figure to this file")
    p.add_argument("--keep-logs", help="folder for the processes' logs (default: temporary)")
    from . import wan_throughput    # noqa: PLC0415  (it imports this module)
    wan_throughput.add_arguments(p)
    args = p.parse_args(argv)
    wan_throughput.check_arguments(p, args)
    args.workers = 2 if args.workers is None else args.workers
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown or not systems or args.workers < 1 or args.iters < 1:
        p.error(f"unknown systems {unknown}" if unknown or not systems
                else "--workers and --iters must be >= 1")
    why = perf_profile.unavailable() if args.perf else ""
    if why:
        p.error(f"--perf: {why}")
    logs = Path(args.keep_logs or tempfile.mkdtemp(prefix="throughput-"))
    logs.mkdir(parents=True, exist_ok=True)
    try:
        with interrupts_raise():
            if args.wan_dcs:
                return wan_throughput.main_wan(args, systems, logs)
            results = measure(systems, args.workers, args.model, args.iters, logs, args.perf)
    except KeyboardInterrupt:
        print("throughput: interrupted; every process was stopped", file=sys.stderr)
        return 130
    print(table(results, args.workers, args.model))
    print(f"logs: {logs}")
    if args.json:
        Path(args.json).write_text(json.dumps({"workers": args.workers, "model": args.model,
                                               "iters": args.iters, "systems": results},
                                              indent=1))
    return 0 if all(r.get("correct") for r in results.values()) else 1
