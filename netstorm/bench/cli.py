"""Side-by-side benchmark: stock MXNet and netstorm on the same emulated WAN, in one run.

    sudo python scripts/bench.py --topology small --workers-per-dc 2 --model resnet18_v1 \\
        --systems mxnet-1ps,mxnet-sharded,netstorm-hips --iters 5 --json out.json --plot out.png

Brings up the emulated WAN (netstorm.wan: one network namespace per DC, tc-shaped links),
runs every system named by --systems on it, one after the other, with the same model shapes
and iterations, and prints a table: per-iteration time (median, p90; the first iteration is a
warm-up and not counted), the ratio to the physical lower bound, whether every result was
exactly right, and the machine's CPU use during the run (a CPU-bound run measures this
machine, not the network: lower --bandwidth-scale). The WAN is always torn down.

    python scripts/bench.py --mode train --data digits --target-accuracy 0.95 \
        --systems mxnet-1ps,mxnet-2bit,netstorm-fapt,netstorm-bsc --plot acc.png

trains a real model on real data with every system instead (--workload: an MLP or a small
conv net on digits, or a transformer language model on the Python documentation), and
reports each one's time and samples to the target quality, its quality curve (the PNG), its
compute utilization and its WAN bytes per sample:

    python scripts/bench.py --mode train --workload lm --target-from mxnet-1ps \
        --systems mxnet-1ps,netstorm-fapt,netstorm-diloco --iters 300 \
        --iters-for netstorm-diloco=3000 --plot lm.png --json lm.json
"""
from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import netstorm
from netstorm import wan as wanlib
from netstorm.geoserver.config.settings import DEFAULT_CHUNK_BYTES
from netstorm.launcher import interrupts_raise
from netstorm.scheduler.planning import cut_lower_bound
from netstorm.scheduler.topology import TopologyError

from netstorm.datasets import DatasetError
from netstorm.geoserver.config.sync import SyncError

from . import awareness, chaos_run, perf_profile, quality_report, torch_systems
from .accuracy import apply_target, comparisons, wan_bytes
from .cpu import RoleCpu, cpu_by_role, measured_window
from .dataplane import dataplane_record
from .link_sampler import LinkSampler, write_samples
from .link_table import measured_links
from .measure import CpuSampler, busiest_links, collect, model_bytes
from .report import fapt_plan, plot, table
from .train_args import eval_every_of, steps_per_wan_round
from .scraper import apply_scrapes
from .systems import (ADAPTIVE, COMPRESSED, DATAPLANE_OF, FAPT_TREES, OBSERVED, STATS_FILE,
                      SYNCED, SYSTEMS, RunContext, cluster_dataplane_missing, configured_dataplane)
from .train_args import (MOMENTUM, SYNC_FLAGS, add_train_arguments, check_compression,
                         check_train_args, compression_params, hyper_parameters, iters_of,
                         mixed_worker_args, sync_settings, worker_args)
from .workloads import METRICS, WORKLOADS

__all__ = ["MOMENTUM", "Progress", "SYNC_FLAGS", "compression_params", "main", "mixed_worker_args",
           "parse_args", "sync_settings", "train_target", "worker_args"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version",
                   version=f"netstorm-bench {netstorm.__version__}")
    p.add_argument("--topology", default="small", help="built-in name or topology file")
    p.add_argument("--systems", default="mxnet-1ps,mxnet-sharded,netstorm-hips",
                   help=f"comma-separated, from: {', '.join(SYSTEMS)}")
    p.add_argument("--workers-per-dc", type=int, default=1, help="workers in every DC")
    p.add_argument("--model", default=None,
                   help="comm mode: any gluon model_zoo name (default resnet18_v1); "
                        "train mode: see --workload")
    p.add_argument("--mode", choices=["comm", "train"], default="comm",
                   help="comm: synchronize gradient-shaped arrays of known values; train: "
                        "train a real model to a target quality (docs/benchmarks.md)")
    p.add_argument("--iters", type=int, default=None,
                   help="iterations per system (default: 5 in comm mode; in train mode 200 "
                        "on digits, 1000 for lm; see --iters-for)")
    p.add_argument("--bandwidth-scale", type=float, default=1.0,
                   help="multiply every link rate (lower it if a run is CPU-bound)")
    p.add_argument("--dynamic", default=None, help="rate trace, e.g. paper9-fluctuating")
    p.add_argument("--period", type=float, default=180.0,
                   help="seconds between rate changes (default: the paper's 180)")
    p.add_argument("--latency", action="store_true",
                   help="emulate the topology's one-way delays (its links' latency_ms, summed "
                        "along the emulated routes) in netstorm's transport; without it every "
                        "delay is 0, also in the predictions. No netem here: stock MXNet "
                        "cannot be delayed, so its systems are refused")
    p.add_argument("--json", default=None, help="write every figure of the run to this file")
    p.add_argument("--plot", default=None,
                   help="PNG: iteration times (comm) or quality against time and samples "
                        "(train), plus the topology and trees beside it")
    p.add_argument("--keep-logs", default=None, help="directory for the processes' output")
    p.add_argument("--perf", action="store_true",
                   help="also sample the machine with Linux perf after each system's warm-up "
                        "and say where its CPU went (TCP, same-host socket, page faults, "
                        "Python, CURVE, ...), in CPU seconds per iteration")
    p.add_argument("--straggler", default=None, metavar="DC=SECONDS",
                   help="give DC's workers that much extra compute per iteration (a DC with "
                        "slower accelerators), e.g. dc1=2")
    p.add_argument("--chunk-bytes", type=int, default=DEFAULT_CHUNK_BYTES,
                   help="netstorm's WAN chunk size (pipelining granularity)")
    add_train_arguments(p)
    chaos_run.add_chaos_arguments(p)
    args = p.parse_args(argv)
    why = perf_profile.unavailable() if args.perf else ""
    if why:
        p.error(f"--perf: {why}")
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s) {unknown}; known: {', '.join(SYSTEMS)}")
    why = torch_systems.refused(args.systems)
    if why:
        p.error(why)
    if args.mode == "train":
        check_train_args(p, args)
    else:
        args.model = args.model or "resnet18_v1"
        args.iters = 5 if args.iters is None else args.iters
        args.iters_for = {}
    chaos_run.check_chaos_args(p, args)
    stock = [s for s in args.systems if s.startswith("mxnet-")]
    if args.latency and stock:
        p.error(f"--latency delays messages in netstorm's own transport (this machine has no "
                f"netem); stock MXNet's ps-lite would run delay-free, an unfair comparison: "
                f"drop {', '.join(stock)} or --latency")
    missing = cluster_dataplane_missing([s for s in args.systems if s in DATAPLANE_OF])
    if missing:
        p.error(f"--systems {','.join(missing)}: {missing[0]} sets the cluster file's "
                f"[transport] dataplane, which this checkout's cluster files do not have")
    compressed = [s for s in args.systems if s in COMPRESSED or s in SYNCED]
    if args.mode == "comm" and compressed:
        p.error(f"{', '.join(compressed)} change the values they move, which comm mode checks "
                f"for exact sums: compare them with --mode train")
    try:
        sync_settings(args)
    except SyncError as exc:
        p.error(str(exc))
    if args.straggler is not None:
        dc, _, seconds = args.straggler.partition("=")
        try:
            args.straggler = (dc.strip(), float(seconds))
        except ValueError:
            p.error(f"--straggler takes DC=SECONDS, e.g. dc1=2, not {args.straggler!r}")
        if not 0 <= args.straggler[1] < float("inf"):
            p.error(f"--straggler: seconds must be a finite number >= 0, got {seconds}")
    why = check_compression(args, args.systems) or missing_prerequisite(args)  # before any WAN
    if why:
        p.error(why)
    return args


EXTRA = "pip install 'netstorm[bench]' (in a checkout: pip install '.[bench]')"


def missing_prerequisite(args) -> str:
    """Why an output or the data cannot work, or '' (before the WAN: a long run never ends
    unable to write its figures). Imports what --plot and the digits need; one probe file."""
    needs = [("--plot", "matplotlib", "matplotlib")] if args.plot else []
    if args.mode == "train" and args.data == "digits":
        needs.append((f"--workload {args.workload} (--data digits)", "sklearn", "scikit-learn"))
    for flag, module, distribution in needs:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{flag} needs {distribution}, not importable here ({exc}): {EXTRA}"
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        why = path and unwritable(Path(path))
        if why:
            return f"{flag} {path}: {why}"
    return ""


def unwritable(target: Path) -> str:
    """Why the file ``target`` cannot be written, or '' (a file is made and removed beside it:
    os.access says yes to root, also on a read-only file system)."""
    if target.is_dir() or not target.parent.is_dir():
        return "is a folder" if target.is_dir() else f"folder {target.parent} does not exist"
    try:
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".netstorm-bench-"):
            return ""
    except OSError as exc:
        return f"cannot write in {target.parent}: {exc.strerror or exc}"


class Progress:
    """A system's log file that also shows rank 0's per-iteration lines on the console, so
    a long run is never silent."""

    def __init__(self, log, name: str, after_warmup=None):
        """``after_warmup``: called once rank 0 says its warm-up iteration ended."""
        self.log, self.name = log, name
        self._after_warmup = after_warmup

    def write(self, text: str) -> None:
        self.log.write(text)
        if "] iter warm-up" in text and self._after_warmup is not None:
            self._after_warmup()
            self._after_warmup = None
        if "] iter " in text:
            print(f"bench: {self.name}: {text.split('] ', 1)[1].rstrip()}", flush=True)

    def flush(self) -> None:
        self.log.flush()


def train_target(args, systems: dict) -> dict:
    """The run's target: ``--target-accuracy`` / ``--target-loss``, or with ``--target-from``
    that system's final quality in this run (None if it has none)."""
    metric = METRICS[WORKLOADS[args.workload].metric]
    value = args.target_accuracy if metric.higher_is_better else args.target_loss
    if args.target_from is not None:
        value = systems.get(args.target_from, {}).get("final_quality")
    return {"metric": metric.name, "value": value, "from": args.target_from}


def main(argv=None) -> int:
    """The command; an error nothing expected is one line (``netstorm-bench: error: ...``)."""
    try:
        return run(parse_args(argv))
    except KeyboardInterrupt:
        print("netstorm-bench: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:    # noqa: BLE001  (the catch-all of an entry point)
        print(f"netstorm-bench: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def run(args) -> int:
    """One benchmark run of the parsed ``args``; the exit code."""
    if getattr(args, "chaos", None):
        return chaos_run.run(args)
    try:
        topology = wanlib.load_topology(args.topology).scaled(args.bandwidth_scale)
        if not args.latency:
            topology = topology.without_latency()
        trace = None
        if args.dynamic:
            trace = [(t, {k: v * args.bandwidth_scale for k, v in rates.items()})
                     for t, rates in wanlib.load_trace(args.dynamic, period_s=args.period)]
            topology = topology.with_rates(trace[0][1])
    except TopologyError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    if args.straggler is not None and args.straggler[0] not in topology.dcs:
        print(f"bench: --straggler names DC {args.straggler[0]!r}; {topology.name} has "
              f"{', '.join(topology.dcs)}", file=sys.stderr)
        return 2
    if args.mode == "train":
        from .training import model_bytes as train_model_bytes   # noqa: PLC0415
        try:        # also builds the lm corpus' cache, which the workers then read
            nbytes = train_model_bytes(args)
        except DatasetError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
    else:
        nbytes = model_bytes(args.model)
    bound_s, bottleneck = cut_lower_bound(topology, nbytes)
    result = {"topology": topology.name, "model": args.model, "model_bytes": nbytes,
              "chunk_bytes": args.chunk_bytes,
              "mode": args.mode, "workers_per_dc": args.workers_per_dc, "iters": args.iters,
              "bandwidth_scale": args.bandwidth_scale, "lower_bound_s": round(bound_s, 4),
              "latency": args.latency,
              "straggler": None if args.straggler is None else
              {"dc": args.straggler[0], "extra_compute_s": args.straggler[1]},
              "bottleneck_cut": sorted(bottleneck), "systems": {}}
    if args.mode == "train":
        result.update(workload=args.workload, data=args.data,
                      architecture=WORKLOADS[args.workload].model,
                      parameters=nbytes // 4, hyper_parameters=hyper_parameters(args),
                      iters_for=args.iters_for,
                      compression={s: compression_params(args)[COMPRESSED[s]]
                                   for s in args.systems if s in COMPRESSED},
                      sync={s: sync_settings(args)[SYNCED[s]].describe()
                            for s in args.systems if s in SYNCED})
    if any(s in FAPT_TREES for s in args.systems):
        result["fapt_plan"] = fapt_plan(topology, nbytes, args.chunk_bytes)
    # absolute: the cluster file the launcher writes elsewhere names files in it
    logs = Path(args.keep_logs).resolve() if args.keep_logs else \
        Path(tempfile.mkdtemp(prefix="bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    try:
        with interrupts_raise(), wanlib.EmulatedWan(topology) as wan, \
                wanlib.LinkCounters(wan) as counters:
            for name in args.systems:
                iters = iters_of(args, name)
                out = logs / name
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                recorder = perf_profile.Recorder(logs / f"{name}.perf.data") \
                    if args.perf else None
                with open(logs / f"{name}.log", "w") as log:
                    ctx = RunContext(wan, topology, args.workers_per_dc,
                                     worker_args(args, wan, iters, eval_every_of(args, name)),
                                     out, Progress(log, name, recorder and recorder.start),
                                     args.chunk_bytes,
                                     compression_params(args), sync_settings(args),
                                     mixed_worker_args(args), latency=args.latency,
                                     local_steps=args.h if args.mode == "train"
                                     else torch_systems.PERIOD)
                    print(f"bench: running {name} ...", flush=True)
                    started = time.monotonic()
                    before = wan.link_bytes()
                    runner = wanlib.TraceRunner(wan, trace).start() if trace else None
                    try:
                        with CpuSampler() as cpu, RoleCpu() as roles, \
                                LinkSampler(counters.read, wan.rates) as link_samples:
                            code = SYSTEMS[name](ctx, out)
                    finally:
                        recorded = recorder is not None and recorder.stop()
                        if runner is not None:
                            runner.stop()
                            wan.apply_rates(topology.rates())   # same start for the next
                    r = collect(out, args.mode, same_weights=name not in SYNCED)
                    if name in OBSERVED:    # its scrape counts; none: not correct
                        apply_scrapes(r, out)
                    after = wan.link_bytes()
                    # every link a byte crossed counts (a route of two links: twice)
                    crossed = wan_bytes(before, after)
                    r["iters"] = iters
                    r["wan_bytes_per_iter"] = crossed // (iters + (args.mode == "comm"))
                    if r.get("samples_per_iter"):
                        r["wan_bytes_per_sample"] = round(
                            crossed / (iters * r["samples_per_iter"]), 1)
                    period = steps_per_wan_round(args, name) if args.mode == "train" else None
                    if period:      # the local-update systems: bytes per outer round
                        r["wan_round_iters"] = period
                        r["wan_bytes_per_outer_round"] = crossed // max(1, iters // period)
                    r["busiest_links"] = busiest_links(
                        before, after, topology, iters + (args.mode == "comm"))
                    if runner is not None and name in ADAPTIVE:
                        r["awareness"] = awareness.summary(out / STATS_FILE, runner)
                    if runner is not None and "_iter_start" in r and name.startswith("netstorm"):
                        rows = awareness.round_costs(
                            awareness.read_stats(out / STATS_FILE), runner, topology,
                            r["_iter_start"], r["_iter_all_s"], nbytes, args.chunk_bytes)
                        r["rounds"] = rows
                        r["trace_started_monotonic"] = runner.started
                        r["round_costs"] = awareness.round_costs_summary(rows)
                    write_samples(link_samples.samples, logs / f"{name}.link-samples.jsonl")
                    r["links"] = measured_links(
                        link_samples.samples, r,
                        result.get("fapt_plan") if name in FAPT_TREES else None, nbytes)
                    r.update(cpu_by_role(roles, r, iters))
                    if recorded:    # the measured iterations only, as r["cpu"]
                        r["cpu_profile"] = perf_profile.cpu_profile(
                            recorder.path, measured_window(r), r["cpu"]["machine_s"])
                    r.pop("_iter_start", None)
                    r.pop("_iter_all_s", None)
                dataplane = dataplane_record(configured_dataplane(name),
                                             logs / f"{name}.log")
                if dataplane:
                    r["dataplane"] = dataplane
                r.update(exit_code=code, cpu_util=round(cpu.mean, 3),
                         wall_s=round(time.monotonic() - started, 1))
                if code != 0:
                    r["correct"] = False
                    r.setdefault("error", f"exit code {code}; see {logs / (name + '.log')}")
                result["systems"][name] = r
                print(f"bench: {name}: median {r.get('median_s', '-')}s, correct="
                      f"{r.get('correct')}, cpu {100 * cpu.mean:.0f}%", flush=True)
    except wanlib.WanUnavailable as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench: interrupted; the WAN and every process were torn down", file=sys.stderr)
        return 130
    if trace:   # the bound for the mean rates seen by the longest run
        longest = max(r["wall_s"] for r in result["systems"].values())
        mean_topology = wanlib.mean_rates(trace, longest, topology)
        bound_s, bottleneck = cut_lower_bound(mean_topology, nbytes)
        result.update(lower_bound_s=round(bound_s, 4), bottleneck_cut=sorted(bottleneck),
                      dynamic=args.dynamic, period_s=args.period)
    fapt = result["systems"].get("netstorm-fapt", {})
    if fapt.get("median_s") and "fapt_plan" in result:
        predicted = result["fapt_plan"]["predicted_s"]
        result["fapt_plan"]["prediction_error"] = round(
            (fapt["median_s"] - predicted) / fapt["median_s"], 4)
    if args.mode == "train":
        result["target"] = train_target(args, result["systems"])
        result["target_accuracy" if result["target"]["metric"] == "accuracy"
               else "target_loss"] = result["target"]["value"]
        for r in result["systems"].values():
            if r.get("curve") is not None:
                apply_target(r, result["target"]["value"])
        result["comparisons"] = comparisons(result["systems"])
    print(table(result))
    if args.mode == "train":
        print(quality_report.table(result))
    errors = {name: r["awareness"].pop("_errors") for name, r in result["systems"].items()
              if "awareness" in r}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.plot:
        if args.mode == "train":
            paths = [quality_report.plot(result, args.plot)] + plot(result, topology, str(
                Path(args.plot).with_name(f"{Path(args.plot).stem}-iterations.png")))
        else:
            paths = plot(result, topology, args.plot)
        for name, errs in errors.items():
            if errs:
                paths.append(awareness.plot_estimates(errs, str(Path(args.plot).with_name(
                    f"{Path(args.plot).stem}-{name}-estimates.png"))))
        print("plots:", ", ".join(paths))
    print(f"logs: {logs}")
    return 0 if all(r.get("correct") for r in result["systems"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
