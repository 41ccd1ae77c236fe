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

trains a real model (an MLP) on real data with every system instead, and reports each one's
time to the target accuracy, its accuracy curve (the PNG) and its WAN bytes per iteration.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from netstorm import wan as wanlib
from netstorm.geoserver.config.settings import DEFAULT_CHUNK_BYTES
from netstorm.launcher import interrupts_raise
from netstorm.scheduler.planning import cut_lower_bound
from netstorm.scheduler.topology import TopologyError

from netstorm.datasets import DatasetError
from netstorm.geoserver.config.compression import CompressionConfig, CompressionError
from netstorm.geoserver.config.sync import SyncConfig, SyncError

from . import accuracy, awareness, perf_profile
from .accuracy import wan_bytes
from .cpu import RoleCpu, cpu_by_role, measured_window
from .measure import CpuSampler, busiest_links, collect, model_bytes
from .report import fapt_plan, plot, table
from .systems import ADAPTIVE, COMPRESSED, STATS_FILE, SYNCED, SYSTEMS, RunContext

__all__ = ["MOMENTUM", "Progress", "SYNC_FLAGS", "compression_params", "main", "mixed_worker_args",
           "parse_args", "sync_settings", "worker_args"]


SYNC_FLAGS = (          # the sync modes' settings in train mode: flag, default, help
    ("--k1", 4, "netstorm-hfa: local steps between a DC's synchronizations"),
    ("--k2", 2, "netstorm-hfa: DC rounds between synchronizations across the WAN"),
    ("--staleness", 2, "netstorm-mixed: rounds a DC may run ahead of the slowest"),
    ("--max-steps", 8, "netstorm-esync: most local steps a fast worker takes per round"))
MOMENTUM = 0.9      # train mode's SGD momentum (in compression with --momentum-correction)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topology", default="small", help="built-in name or topology file")
    p.add_argument("--systems", default="mxnet-1ps,mxnet-sharded,netstorm-hips",
                   help=f"comma-separated, from: {', '.join(SYSTEMS)}")
    p.add_argument("--workers-per-dc", type=int, default=1, help="workers in every DC")
    p.add_argument("--model", default=None,
                   help="comm mode: any gluon model_zoo name (default resnet18_v1); "
                        "train mode: mlp (the default)")
    p.add_argument("--mode", choices=["comm", "train"], default="comm",
                   help="comm: synchronize gradient-shaped arrays of known values; train: "
                        "train a real model to --target-accuracy (docs/benchmarks.md)")
    p.add_argument("--iters", type=int, default=None,
                   help="iterations per system (default: 5 in comm mode, 200 in train mode)")
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
                   help="PNG: iteration times (comm) or accuracy against time (train), "
                        "plus the topology and trees beside it")
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
    t = p.add_argument_group("train mode (the same for every system)")
    t.add_argument("--data", default="digits",
                   help="'digits' (scikit-learn's, bundled) or a directory of MNIST IDX files")
    t.add_argument("--target-accuracy", type=float, default=None,
                   help="test accuracy whose first crossing is each system's time to target")
    t.add_argument("--hidden", type=int, default=1024, help="mlp hidden layer width")
    t.add_argument("--batch-size", type=int, default=32, help="per worker")
    t.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (momentum 0.9)")
    t.add_argument("--eval-every", type=int, default=5, help="iterations between evaluations")
    t.add_argument("--threshold", type=float, default=1.0,
                   help="2bit threshold of mxnet-2bit (default: the best of a sweep on the "
                        "default model; MXNet's own default 0.5 is worse, docs/benchmarks.md)")
    t.add_argument("--ratio", type=float, default=0.1,
                   help="share of elements sent per hop by netstorm-bsc and netstorm-mpq")
    t.add_argument("--warmup-rounds", type=int, default=20,
                   help="bsc/mpq rounds over which the ratio decays from dense to --ratio")
    for flag, default, text in SYNC_FLAGS:
        t.add_argument(flag, type=int, default=default, help=text)
    t.add_argument("--momentum-correction", action=argparse.BooleanOptionalAction,
                   default=False, help="bsc/mpq: DGC momentum correction (SGD's momentum "
                                       "0.9 applied inside compression instead)")
    args = p.parse_args(argv)
    why = perf_profile.unavailable() if args.perf else ""
    if why:
        p.error(f"--perf: {why}")
    if args.model is None:
        args.model = "resnet18_v1" if args.mode == "comm" else "mlp"
    if args.iters is None:
        args.iters = 5 if args.mode == "comm" else 200
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s) {unknown}; known: {', '.join(SYSTEMS)}")
    stock = [s for s in args.systems if s.startswith("mxnet-")]
    if args.latency and stock:
        p.error(f"--latency delays messages in netstorm's own transport (this machine has no "
                f"netem); stock MXNet's ps-lite would run delay-free, an unfair comparison: "
                f"drop {', '.join(stock)} or --latency")
    compressed = [s for s in args.systems if s in COMPRESSED or s in SYNCED]
    if args.mode == "comm" and compressed:
        p.error(f"{', '.join(compressed)} change the values they move, which comm mode checks "
                f"for exact sums: compare them with --mode train")
    try:
        sync_settings(args)
    except SyncError as exc:
        p.error(str(exc))
    if args.mode == "train":
        from .training import MODELS   # noqa: PLC0415  (imports MXNet)
        if args.model not in MODELS:
            p.error(f"--mode train trains {', '.join(MODELS)}, not {args.model!r}")
    if args.straggler is not None:
        dc, _, seconds = args.straggler.partition("=")
        try:
            args.straggler = (dc.strip(), float(seconds))
        except ValueError:
            p.error(f"--straggler takes DC=SECONDS, e.g. dc1=2, not {args.straggler!r}")
        if not 0 <= args.straggler[1] < float("inf"):
            p.error(f"--straggler: seconds must be a finite number >= 0, got {seconds}")
    if args.target_accuracy is not None and not 0 < args.target_accuracy <= 1:
        p.error(f"--target-accuracy must be in (0, 1], got {args.target_accuracy}")
    for kind in {COMPRESSED[s] for s in compressed if s in COMPRESSED}:    # before any WAN
        try:
            CompressionConfig.from_params(compression_params(args)[kind],
                                          where=f"--{kind} settings")
        except CompressionError as exc:
            p.error(str(exc))
    return args


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


def compression_params(args) -> dict:
    """The compression_params of each compression type the benchmark runs (one setting each,
    the same for MXNet's and netstorm's systems of that type)."""
    sparse = {"ratio": args.ratio, "warmup_rounds": args.warmup_rounds,
              **({"momentum": MOMENTUM} if args.momentum_correction else {})}
    return {"2bit": {"type": "2bit", "threshold": args.threshold},
            "fp16": {"type": "fp16"},
            "bsc": {"type": "bsc", **sparse},
            "mpq": {"type": "mpq", **sparse}}


def sync_settings(args) -> dict:
    """The SyncConfig of each sync mode the benchmark runs (from --k1, --k2, --staleness,
    --max-steps)."""
    return {"hfa": SyncConfig(mode="hfa", k1=args.k1, k2=args.k2),
            "mixed": SyncConfig(mode="mixed", staleness=args.staleness),
            "esync": SyncConfig(mode="esync", max_steps=args.max_steps)}


def mixed_worker_args(args) -> list:
    """netstorm-mixed's optimizer: MXNet's DCASGD, without momentum (MXNet 1.9.1's DCASGD
    cannot run with it), at the learning rate that gives SGD-with-momentum's steady-state
    step: ``lr / (1 - momentum)``."""
    return ["--optimizer", "dcasgd", "--lr", str(args.lr / (1 - MOMENTUM)), "--momentum", "0"]


def worker_args(args, wan=None) -> list:
    common = ["--model", args.model, "--mode", args.mode, "--iters", str(args.iters)]
    if args.straggler is not None:
        dc, seconds = args.straggler
        common += ["--straggler-host", wan.dc_address(dc), "--straggler-s", str(seconds)]
    if args.mode == "comm":
        return common
    return common + ["--data", args.data, "--hidden", str(args.hidden), "--batch-size",
                     str(args.batch_size), "--lr", str(args.lr), "--momentum", str(MOMENTUM),
                     "--eval-every", str(args.eval_every)]


def main(argv=None) -> int:
    args = parse_args(argv)
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
        try:
            nbytes = train_model_bytes(args.model, args.hidden, args.data)
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
        result.update(data=args.data, target_accuracy=args.target_accuracy,
                      hyper_parameters={k: getattr(args, k) for k in (
                          "hidden", "batch_size", "lr", "eval_every")},
                      compression={s: compression_params(args)[COMPRESSED[s]]
                                   for s in args.systems if s in COMPRESSED},
                      sync={s: sync_settings(args)[SYNCED[s]].describe()
                            for s in args.systems if s in SYNCED})
    if "netstorm-fapt" in args.systems:
        result["fapt_plan"] = fapt_plan(topology, nbytes, args.chunk_bytes)
    logs = Path(args.keep_logs) if args.keep_logs else Path(tempfile.mkdtemp(prefix="bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    try:
        with interrupts_raise(), wanlib.EmulatedWan(topology) as wan:
            for name in args.systems:
                out = logs / name
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                recorder = perf_profile.Recorder(logs / f"{name}.perf.data") \
                    if args.perf else None
                with open(logs / f"{name}.log", "w") as log:
                    ctx = RunContext(wan, topology, args.workers_per_dc, worker_args(args, wan),
                                     out, Progress(log, name, recorder and recorder.start),
                                     args.chunk_bytes,
                                     compression_params(args), sync_settings(args),
                                     mixed_worker_args(args), latency=args.latency)
                    print(f"bench: running {name} ...", flush=True)
                    started = time.monotonic()
                    before = wan.link_bytes()
                    runner = wanlib.TraceRunner(wan, trace).start() if trace else None
                    try:
                        with CpuSampler() as cpu, RoleCpu() as roles:
                            code = SYSTEMS[name](ctx, out)
                    finally:
                        recorded = recorder is not None and recorder.stop()
                        if runner is not None:
                            runner.stop()
                            wan.apply_rates(topology.rates())   # same start for the next
                    r = collect(out, args.mode, args.target_accuracy,
                                same_weights=name not in SYNCED)
                    after = wan.link_bytes()
                    # every link a byte crossed counts (a route of two links: twice)
                    r["wan_bytes_per_iter"] = wan_bytes(before, after) // (
                        args.iters + (args.mode == "comm"))
                    r["busiest_links"] = busiest_links(
                        before, after, topology, args.iters + (args.mode == "comm"))
                    if runner is not None and name in ADAPTIVE:
                        r["awareness"] = awareness.summary(out / STATS_FILE, runner)
                    if runner is not None and "_iter_start" in r and name.startswith("netstorm"):
                        rows = awareness.round_costs(
                            awareness.read_stats(out / STATS_FILE), runner, topology,
                            r["_iter_start"], r["_iter_all_s"], nbytes, args.chunk_bytes)
                        r["rounds"] = rows
                        r["trace_started_monotonic"] = runner.started
                        r["round_costs"] = awareness.round_costs_summary(rows)
                    r.update(cpu_by_role(roles, r, args.iters))
                    if recorded:    # the measured iterations only, as r["cpu"]
                        r["cpu_profile"] = perf_profile.cpu_profile(
                            recorder.path, measured_window(r), r["cpu"]["machine_s"])
                    r.pop("_iter_start", None)
                    r.pop("_iter_all_s", None)
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
    print(table(result))
    if args.mode == "train":
        print(accuracy.table(result))
    errors = {name: r["awareness"].pop("_errors") for name, r in result["systems"].items()
              if "awareness" in r}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.plot:
        if args.mode == "train":
            paths = [accuracy.plot(result, args.plot)] + plot(result, topology, str(
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
