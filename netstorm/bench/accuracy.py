"""``bench.py --mode train``: what a training run measured, per system, and the figure it is
judged by (test accuracy against wall time).

Per system: ``accuracy_curve`` ([training seconds, test accuracy, iteration] from rank 0),
``time_to_target_s`` and ``iterations_to_target`` (the first evaluation at or above the
target; null if never reached), ``final_accuracy``, ``comm_fraction`` (the share of an
iteration not spent computing: 1 - the busiest rank's mean compute seconds / the mean
iteration seconds of the slowest rank, warm-up excluded) and ``wan_bytes_per_iter`` (bytes
that crossed the emulated WAN during the run, start-up included, per iteration).
"""
from __future__ import annotations

import numpy as np

__all__ = ["COLUMNS", "plot", "summarize", "table", "wan_bytes"]


def summarize(ranks: list, target: float | None) -> dict:
    """The train-mode figures from the workers' result files (``ranks``, every rank's dict)."""
    curve = next((r["accuracy_curve"] for r in ranks if r.get("accuracy_curve")), [])
    slowest = np.max(np.array([r["iter_s"] for r in ranks]), axis=0)[1:]
    busiest = np.max(np.array([r["compute_s"] for r in ranks]), axis=0)[1:]
    out = {"accuracy_curve": curve,
           "final_accuracy": curve[-1][1] if curve else None,
           "comm_fraction": (round(float(1 - busiest.mean() / slowest.mean()), 4)
                             if len(slowest) and slowest.mean() > 0 else None),
           "compute_s_per_iter": round(float(busiest.mean()), 5) if len(busiest) else None,
           "time_to_target_s": None, "iterations_to_target": None}
    if target is not None:
        hit = next((point for point in curve if point[1] >= target), None)
        if hit is not None:
            out.update(time_to_target_s=hit[0], iterations_to_target=hit[2])
    return out


def wan_bytes(before: dict, after: dict) -> int:
    """Bytes that left every link's shaper between two ``EmulatedWan.link_bytes()`` reads."""
    return int(sum(sent - before[k] for k, sent in after.items()
                   if sent is not None and before.get(k) is not None))


COLUMNS = (("system", "<16"), ("to target s", ">12"), ("iters", ">7"), ("final acc", ">10"),
           ("s/iter", ">8"), ("comm %", ">8"), ("WAN MB/iter", ">12"), ("correct", ">9"))


def _row(cells) -> str:
    return "".join(f"{cell:{fmt}}" for cell, (_, fmt) in zip(cells, COLUMNS))


def table(result: dict) -> str:
    """One row per system (time to target, iterations, final accuracy, seconds per
    iteration, communication share, WAN bytes), then each netstorm system's speed-up in
    time to target over each stock MXNet one."""
    target = result.get("target_accuracy")
    header = (f"time to accuracy: {result['model']} on {result['data']} "
              f"({result['model_bytes'] / 1e6:.1f} MB of gradients), topology="
              f"{result['topology']}, workers/DC={result['workers_per_dc']}, "
              f"{result['iters']} iterations, target {target}"
              + (f", straggler {result['straggler']['dc']} +"
                 f"{result['straggler']['extra_compute_s']:g} s/iter"
                 if result.get("straggler") else ""))
    lines = [header, _row(name for name, _ in COLUMNS)]
    for name, r in result["systems"].items():
        if not r.get("iter_s"):
            lines.append(f"{name:<16}{'-':>12}  {r.get('error', 'failed')}")
            continue
        to_target, final = r.get("time_to_target_s"), r.get("final_accuracy")
        lines.append(_row((
            name, "never" if to_target is None else f"{to_target:.1f}",
            r.get("iterations_to_target") or "-", "-" if final is None else f"{final:.4f}",
            f"{r['median_s']:.3f}", f"{100 * (r.get('comm_fraction') or 0):.1f}%",
            f"{r.get('wan_bytes_per_iter', 0) / 1e6:.2f}", "yes" if r["correct"] else "NO")))
    reached = {n: r["time_to_target_s"] for n, r in result["systems"].items()
               if r.get("time_to_target_s")}
    for a, ta in reached.items():
        for b, tb in reached.items():
            if a.startswith("netstorm") and b.startswith("mxnet"):
                lines.append(f"time to {target}: {a} {tb / ta:.2f}x sooner than {b}")
    return "\n".join(lines)


def plot(result: dict, path: str) -> str:
    """Test accuracy against training wall time, one line per system, the target dashed."""
    import matplotlib   # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt   # noqa: PLC0415
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, r in result["systems"].items():
        curve = r.get("accuracy_curve") or []
        if curve:
            ax.plot([p[0] for p in curve], [p[1] for p in curve], label=name,
                    linestyle="--" if name.startswith("mxnet") else "-")
    if result.get("target_accuracy") is not None:
        ax.axhline(result["target_accuracy"], color="k", linewidth=0.8, linestyle=":",
                   label=f"target {result['target_accuracy']}")
    ax.set_xscale("log")
    ax.set_xlabel("training wall time, s (log scale)")
    ax.set_ylabel("test accuracy")
    straggler = result.get("straggler")
    ax.set_title(f"{result['model']} on {result['data']}, topology {result['topology']}, "
                 f"{result['workers_per_dc']} worker(s)/DC" + (
                     f", {straggler['dc']} +{straggler['extra_compute_s']:g} s/iter"
                     if straggler else ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
