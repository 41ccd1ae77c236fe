#!/usr/bin/env python3
"""Side-by-side benchmark: stock MXNet and netstorm on the same emulated WAN, in one run.

    sudo python scripts/bench.py --topology small --workers-per-dc 2 --model resnet18_v1 \\
        --systems mxnet-1ps,mxnet-sharded,netstorm-hips --iters 5 --json out.json --plot out.png

Brings up the emulated WAN (scripts/wan.py: one network namespace per DC, tc-shaped links),
runs every system named by --systems on it, one after the other, with the same model shapes
and iterations, and prints a table: per-iteration time (median, p90; the first iteration is a
warm-up and not counted), the ratio to the physical lower bound, whether every result was
exactly right, and the machine's CPU use during the run (a CPU-bound run measures this
machine, not the network: lower --bandwidth-scale). The WAN is always torn down.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_awareness  # noqa: E402
import launch  # noqa: E402
import wan as wanlib  # noqa: E402
from geoserver.cluster import ClusterConfig, DataCenter, LinkSpec  # noqa: E402
from scheduler import topology as topo  # noqa: E402

CPU_BOUND = 0.85     # mean machine CPU use above which a run is flagged CPU-bound


@dataclass
class RunContext:
    wan: object
    topology: object
    workers_per_dc: int
    worker_args: list
    out_dir: Path
    log: object
    chunk_bytes: int = 1 << 20

    @property
    def best_dc(self) -> str:
        """The DC with the most link capacity (in + out): where a single PS goes."""
        graph = self.topology.graph()
        return max(self.topology.dcs, key=lambda dc: (
            sum(d["mbps"] for *_, d in graph.out_edges(dc, data=True))
            + sum(d["mbps"] for *_, d in graph.in_edges(dc, data=True)), -self.topology.dcs.index(dc)))

    def command(self, kvstore: str, out: Path) -> list:
        return [sys.executable, str(REPO / "scripts" / "bench_worker.py"), "--kvstore", kvstore,
                "--out", str(out), *self.worker_args]


def run_mxnet(ctx: RunContext, out: Path, sharded: bool) -> int:
    servers = list(ctx.topology.dcs) if sharded else [ctx.best_dc]
    if sharded:   # scheduler beside the first server: put the best-connected DC first
        servers.remove(ctx.best_dc)
        servers.insert(0, ctx.best_dc)
    return launch.run_pslite_cluster(servers, list(ctx.topology.dcs), ctx.workers_per_dc,
                                     ctx.command("dist_sync", out), address=ctx.wan.dc_address,
                                     wrap_dc=ctx.wan.exec_prefix, out=ctx.log)


def run_netstorm(ctx: RunContext, out: Path, policy: str, adapt: bool = False,
                 multipath: bool = False) -> int:
    """netstorm with the scheduler in the best-connected DC. ``hips``: the star rooted there;
    ``fapt``: multi-root trees computed at start from the links' rates (declared in the
    cluster file, as an operator would), never updated unless ``adapt`` (re-planned from
    passive measurements); ``multipath``: idle links relay part of busy links' chunks. The
    scheduler's estimates and policies go to ``out/scheduler-stats.jsonl``."""
    hub = ctx.best_dc
    links = tuple(LinkSpec(l.a, l.b, l.mbps_ab, l.mbps_ba) for l in ctx.topology.links)
    config = ClusterConfig(scheduler_host=ctx.wan.dc_address(hub),
                           scheduler_port=launch.free_port(),
                           dcs=tuple(DataCenter(dc, ctx.wan.dc_address(dc), 0, ctx.workers_per_dc)
                                     for dc in ctx.topology.dcs),
                           policy=policy, hub=hub, links=links, timeout_s=600.0,
                           chunk_bytes=ctx.chunk_bytes, adapt=adapt, multipath=multipath,
                           stats=str(out / STATS_FILE))
    return launch.run_cluster(config, ctx.command("netstorm", out),
                              wrap_dc=ctx.wan.exec_prefix, out=ctx.log)


SYSTEMS = {
    "mxnet-1ps": lambda ctx, out: run_mxnet(ctx, out, sharded=False),
    "mxnet-sharded": lambda ctx, out: run_mxnet(ctx, out, sharded=True),
    "netstorm-hips": lambda ctx, out: run_netstorm(ctx, out, "star"),
    "netstorm-fapt": lambda ctx, out: run_netstorm(ctx, out, "fapt"),
    "netstorm-aware": lambda ctx, out: run_netstorm(ctx, out, "fapt", adapt=True),
    "netstorm-full": lambda ctx, out: run_netstorm(ctx, out, "fapt", adapt=True,
                                                   multipath=True),
}
STATS_FILE = "scheduler-stats.jsonl"
ADAPTIVE = ("netstorm-aware", "netstorm-full")     # their estimates are compared under --dynamic


@dataclass
class CpuSampler:
    """Samples the machine's CPU use (0..1) every ``period_s`` in a background thread."""

    period_s: float = 0.5
    samples: list = field(default_factory=list)

    def __enter__(self):
        self._stop = threading.Event()
        psutil.cpu_percent(None)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.period_s):
            self.samples.append(psutil.cpu_percent(None) / 100.0)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples)) if self.samples else 0.0


def collect(out: Path, mode: str) -> dict:
    """Merge the workers' JSON files: an iteration lasts until its slowest worker is done."""
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    if not ranks or len(ranks) != ranks[0]["num_workers"]:
        return {"iter_s": [], "correct": False, "error": f"{len(ranks)} worker results"}
    slowest = np.max(np.array([r["iter_s"] for r in ranks]), axis=0)
    per_iter = slowest[1:]                                                  # drop warm-up
    times = {}
    if mode == "comm":
        correct = all(r["exact_sums"] for r in ranks)
        if all("iter_start_monotonic" in r for r in ranks):    # every iteration, warm-up too
            times = {"_iter_start": np.min([r["iter_start_monotonic"] for r in ranks],
                                           axis=0).tolist(),
                     "_iter_all_s": slowest.tolist()}
    else:
        correct = len({r["weights_sha256"] for r in ranks}) == 1
    return {"iter_s": [round(float(t), 4) for t in per_iter],
            "median_s": round(float(np.median(per_iter)), 4),
            "mean_s": round(float(np.mean(per_iter)), 4),
            "p90_s": round(float(np.percentile(per_iter, 90)), 4), "correct": bool(correct),
            "model_bytes": ranks[0]["model_bytes"], **times}


def busiest_links(before: dict, after: dict, topology, iterations: int, top: int = 3) -> list:
    """Where the time went: each link direction's busy seconds per iteration (bytes it sent
    during the run / its rate / iterations, so start-up traffic is spread in), busiest
    first. Compare with the iteration time: a busiest link near it is saturated."""
    busy = []
    for (a, b), sent in after.items():
        rate = topology.rate(a, b)
        if sent is None or before.get((a, b)) is None or rate <= 0:
            continue
        seconds = (sent - before[(a, b)]) * 8 / (rate * 1e6) / iterations
        busy.append({"link": f"{a}->{b}", "mbps": rate, "busy_s_per_iter": round(seconds, 3)})
    return sorted(busy, key=lambda x: -x["busy_s_per_iter"])[:top]


def model_bytes(model: str) -> int:
    import mxnet as mx
    from mxnet import gluon
    net = gluon.model_zoo.vision.get_model(model, pretrained=False)
    net.initialize()
    size = 299 if model.startswith("inception") else 224
    net(mx.nd.zeros((1, 3, size, size)))
    return sum(4 * int(np.prod(p.shape)) for p in net.collect_params().values()
               if p.grad_req != "null")


def table(result: dict) -> str:
    bound = result["lower_bound_s"]
    lines = [f"topology={result['topology']} model={result['model']} "
             f"({result['model_bytes'] / 1e6:.1f} MB) mode={result['mode']} "
             f"workers/DC={result['workers_per_dc']} lower bound={bound:.3f}s",
             f"{'system':<16}{'median s':>10}{'mean s':>10}{'p90 s':>10}{'x bound':>9}"
             f"{'correct':>9}{'cpu':>7}  note"]
    for name, r in result["systems"].items():
        if not r.get("iter_s"):
            lines.append(f"{name:<16}{'-':>10}{'-':>10}{'-':>10}{'-':>9}{'NO':>9}{'':>7}  "
                         f"{r.get('error', 'failed')}")
            continue
        note = "CPU-bound: lower --bandwidth-scale" if r["cpu_util"] > CPU_BOUND else ""
        if r.get("busiest_links"):
            top = r["busiest_links"][0]
            note = (f"busiest {top['link']} {top['busy_s_per_iter']:.2f}s/iter incl. start-up"
                    + (f"; {note}" if note else ""))
        mean = f"{r['mean_s']:.3f}" if "mean_s" in r else "-"
        lines.append(f"{name:<16}{r['median_s']:>10.3f}{mean:>10}{r['p90_s']:>10.3f}"
                     f"{r['median_s'] / bound:>9.2f}{'yes' if r['correct'] else 'NO':>9}"
                     f"{100 * r['cpu_util']:>6.0f}%  {note}")
    plan = result.get("fapt_plan")
    if plan:
        roots = ", ".join(f"{t['root']} {100 * t['share']:.0f}%" for t in plan["trees"])
        lines.append(f"netstorm-fapt trees: {roots}; time model predicted "
                     f"{plan['predicted_s']:.3f}s"
                     + (f" (measured {100 * plan['prediction_error']:+.0f}% vs prediction)"
                        if "prediction_error" in plan else ""))
    for name, r in result["systems"].items():
        aware = r.get("awareness")
        if aware:
            lines.append(f"{name} awareness: median estimate error "
                         f"{aware['awareness_median_rel_error']} over {aware['estimates']} "
                         f"estimates; {aware['policy_switches']} policy switches; iterations "
                         f"to react per rate change: "
                         f"{[x['iterations'] for x in aware['reactions']]}")
        costs = r.get("round_costs")
        if costs:
            lines.append(f"{name} per round (time model at the emulator's rates): measured "
                         f"{costs['mean_measured_s']}s, policy in force worth "
                         f"{costs['mean_in_force_s']}s, best policy worth "
                         f"{costs['mean_best_s']}s (means)")
    names = [n for n, r in result["systems"].items() if r.get("iter_s")]
    fapt = result["systems"].get("netstorm-fapt", {})
    for a in ("netstorm-aware", "netstorm-full"):       # the awareness ablation
        r = result["systems"].get(a, {})
        if a in names and "netstorm-fapt" in names and "mean_s" in r and "mean_s" in fapt:
            lines.append(f"speed-up {a} over netstorm-fapt: "
                         f"{fapt['median_s'] / r['median_s']:.2f}x by median, "
                         f"{fapt['mean_s'] / r['mean_s']:.2f}x by mean s/iter")
    for a in names:
        for b in names:
            if a != b and a.startswith("netstorm") and b.startswith("mxnet"):
                lines.append(f"speed-up {a} over {b}: "
                             f"{result['systems'][b]['median_s'] / result['systems'][a]['median_s']:.2f}x")
    return "\n".join(lines)


def fapt_plan(topology, nbytes: int, chunk_bytes: int = 1 << 20) -> dict:
    """The trees the scheduler will choose for this topology (the same call it makes) and
    the time model's prediction for this model, to compare with the measured time."""
    from scheduler.fapt import compute_policy, predict_iteration_s
    from scheduler.policy import NOMINAL_MODEL_BYTES
    plan = compute_policy(topology, NOMINAL_MODEL_BYTES, chunk_bytes=chunk_bytes)
    pairs = list(zip(plan.policy.trees, plan.shares))
    return {"trees": [{"root": t.root, "share": round(s, 4), "parent": t.parent}
                      for t, s in pairs],
            "predicted_s": round(predict_iteration_s(pairs, topology, nbytes, chunk_bytes), 4),
            "method": plan.method}


def plot_trees(plan: dict, topology, path: str) -> str:
    """One panel per tree of the FAPT policy: its edges over the link graph, root and share."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx
    trees = plan["trees"]
    cols = min(3, len(trees))
    rows = (len(trees) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), squeeze=False)
    graph = topology.graph().to_undirected()
    pos = nx.spring_layout(graph, seed=1)
    for ax, tree in zip(axes.flat, trees):
        edges = [(c, p) for c, p in tree["parent"].items() if p is not None]
        nx.draw_networkx_edges(graph, pos, ax=ax, edge_color="#dddddd")
        nx.draw_networkx_edges(graph, pos, edgelist=edges, ax=ax, width=2.5,
                               edge_color="#d62728")
        colors = ["#ff9896" if n == tree["root"] else "#9cc3e6" for n in graph.nodes]
        nx.draw_networkx_nodes(graph, pos, ax=ax, node_color=colors, node_size=500)
        nx.draw_networkx_labels(graph, pos, ax=ax, font_size=8)
        ax.set_title(f"root {tree['root']}: {100 * tree['share']:.0f}% of the model")
        ax.axis("off")
    for ax in list(axes.flat)[len(trees):]:
        ax.axis("off")
    fig.suptitle(f"netstorm-fapt trees on {topology.name} (grey: unused links)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot(result: dict, topology, path: str) -> list:
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in result["systems"].items():
        if r.get("iter_s"):
            ax.plot(range(1, len(r["iter_s"]) + 1), r["iter_s"], marker="o", label=name)
    ax.axhline(result["lower_bound_s"], color="k", linestyle="--", label="lower bound")
    ax.set_xlabel("iteration (after warm-up)")
    ax.set_ylabel("seconds")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_title(f"{result['model']} {result['mode']} on {result['topology']}, "
                 f"{result['workers_per_dc']} worker(s)/DC")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    topo_path = str(Path(path).with_name(Path(path).stem + "-topology.png"))
    fig, ax = plt.subplots(figsize=(6, 5))
    graph = topology.graph().to_undirected()
    pos = nx.spring_layout(graph, seed=1)
    nx.draw_networkx(graph, pos, ax=ax, node_color="#9cc3e6", node_size=900)
    labels = {(l.a, l.b): f"{l.mbps_ab:.0f}/{l.mbps_ba:.0f}" for l in topology.links}
    nx.draw_networkx_edge_labels(graph, pos, edge_labels=labels, ax=ax, font_size=8)
    ax.set_title(f"{topology.name}: link rates, Mbit/s (a->b / b->a)")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(topo_path, dpi=120)
    plt.close(fig)
    paths = [path, topo_path]
    if "fapt_plan" in result:
        paths.append(plot_trees(result["fapt_plan"], topology,
                                str(Path(path).with_name(Path(path).stem + "-trees.png"))))
    return paths


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topology", default="small", help="built-in name or topology file")
    p.add_argument("--systems", default="mxnet-1ps,mxnet-sharded,netstorm-hips",
                   help=f"comma-separated, from: {', '.join(SYSTEMS)}")
    p.add_argument("--workers-per-dc", type=int, default=1)
    p.add_argument("--model", default="resnet18_v1", help="any gluon model_zoo name")
    p.add_argument("--mode", choices=["comm", "train"], default="comm")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--bandwidth-scale", type=float, default=1.0,
                   help="multiply every link rate (lower it if a run is CPU-bound)")
    p.add_argument("--dynamic", default=None, help="rate trace, e.g. paper9-fluctuating")
    p.add_argument("--period", type=float, default=180.0,
                   help="seconds between rate changes (default: the paper's 180)")
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    p.add_argument("--keep-logs", default=None, help="directory for the processes' output")
    p.add_argument("--chunk-bytes", type=int, default=1 << 20,
                   help="netstorm's WAN chunk size (pipelining granularity)")
    args = p.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s) {unknown}; known: {', '.join(SYSTEMS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        topology = topo.load_topology(args.topology).scaled(args.bandwidth_scale)
        trace = None
        if args.dynamic:
            trace = [(t, {k: v * args.bandwidth_scale for k, v in rates.items()})
                     for t, rates in topo.load_trace(args.dynamic, period_s=args.period)]
            topology = topology.with_rates(trace[0][1])
    except topo.TopologyError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    nbytes = model_bytes(args.model)
    bound_s, bottleneck = topo.cut_lower_bound(topology, nbytes)
    result = {"topology": topology.name, "model": args.model, "model_bytes": nbytes,
              "chunk_bytes": args.chunk_bytes,
              "mode": args.mode, "workers_per_dc": args.workers_per_dc, "iters": args.iters,
              "bandwidth_scale": args.bandwidth_scale, "lower_bound_s": round(bound_s, 4),
              "bottleneck_cut": sorted(bottleneck), "systems": {}}
    if "netstorm-fapt" in args.systems:
        result["fapt_plan"] = fapt_plan(topology, nbytes, args.chunk_bytes)
    worker_args = ["--model", args.model, "--mode", args.mode, "--iters", str(args.iters)]
    logs = Path(args.keep_logs) if args.keep_logs else Path(tempfile.mkdtemp(prefix="bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    try:
        with launch.interrupts_raise(), wanlib.EmulatedWan(topology) as wan:
            for name in args.systems:
                out = logs / name
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                with open(logs / f"{name}.log", "w") as log:
                    ctx = RunContext(wan, topology, args.workers_per_dc, worker_args, out, log,
                                     args.chunk_bytes)
                    print(f"bench: running {name} ...", flush=True)
                    started = time.monotonic()
                    before = wan.link_bytes()
                    runner = wanlib.TraceRunner(wan, trace).start() if trace else None
                    try:
                        with CpuSampler() as cpu:
                            code = SYSTEMS[name](ctx, out)
                    finally:
                        if runner is not None:
                            runner.stop()
                            wan.apply_rates(topology.rates())   # same start for the next
                    r = collect(out, args.mode)
                    r["busiest_links"] = busiest_links(before, wan.link_bytes(), topology,
                                                       args.iters + 1)
                    if runner is not None and name in ADAPTIVE:
                        r["awareness"] = bench_awareness.summary(out / STATS_FILE, runner)
                    if runner is not None and "_iter_start" in r and name.startswith("netstorm"):
                        rows = bench_awareness.round_costs(
                            bench_awareness.read_stats(out / STATS_FILE), runner, topology,
                            r["_iter_start"], r["_iter_all_s"], nbytes, args.chunk_bytes)
                        r["rounds"] = rows
                        r["trace_started_monotonic"] = runner.started
                        r["round_costs"] = bench_awareness.round_costs_summary(rows)
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
        mean_topology = topo.mean_rates(trace, longest, topology)
        bound_s, bottleneck = topo.cut_lower_bound(mean_topology, nbytes)
        result.update(lower_bound_s=round(bound_s, 4), bottleneck_cut=sorted(bottleneck),
                      dynamic=args.dynamic, period_s=args.period)
    fapt = result["systems"].get("netstorm-fapt", {})
    if fapt.get("median_s") and "fapt_plan" in result:
        predicted = result["fapt_plan"]["predicted_s"]
        result["fapt_plan"]["prediction_error"] = round(
            (fapt["median_s"] - predicted) / fapt["median_s"], 4)
    print(table(result))
    errors = {name: r["awareness"].pop("_errors") for name, r in result["systems"].items()
              if "awareness" in r}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.plot:
        paths = plot(result, topology, args.plot)
        for name, errs in errors.items():
            if errs:
                paths.append(bench_awareness.plot_estimates(errs, str(Path(args.plot).with_name(
                    f"{Path(args.plot).stem}-{name}-estimates.png"))))
        print("plots:", ", ".join(paths))
    print(f"logs: {logs}")
    return 0 if all(r.get("correct") for r in result["systems"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
