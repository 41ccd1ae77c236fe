"""``bench.py --mode train``'s result as a table and a plot: each system's quality (test
accuracy or validation loss, netstorm.bench.accuracy) against wall time and samples."""
from __future__ import annotations

from .workloads import METRICS

__all__ = ["COLUMNS", "plot", "table", "target_text"]

COLUMNS = (("system", "<26"), ("iters", ">6"), ("to target s", ">12"), ("iters to", ">9"),
           ("samples to", ">11"), ("final", ">8"), ("ppl", ">8"), ("s/iter", ">8"),
           ("comm %", ">8"), ("compute %", ">10"), ("WAN KB/sample", ">14"), ("correct", ">8"))


def _row(cells, loss: bool) -> str:
    return "".join(f"{cell:{fmt}}" for cell, (name, fmt) in zip(cells, COLUMNS)
                   if loss or name != "ppl")


def _metric(result: dict):
    return METRICS[(result.get("target") or {}).get("metric") or next(
        (r["metric"] for r in result["systems"].values() if r.get("metric")), "accuracy")]


def target_text(result: dict) -> str:
    """``0.95`` or ``5.1234 (the final loss of mxnet-1ps)`` or ``none``."""
    target = result.get("target") or {}
    if target.get("value") is None:
        return f"none ({target['from']} has no final value)" if target.get("from") else "none"
    source = f" (the final {target['metric']} of {target['from']})" if target.get("from") \
        else ""
    return f"{target['value']:g}{source}"


def table(result: dict) -> str:
    """One row per system (its iterations, time, iterations and samples to target, final
    quality, seconds per iteration, communication share, compute utilization, WAN bytes
    per sample), then the speed-ups in time to target and the WAN bytes ratios."""
    metric = _metric(result)
    loss = metric.name == "loss"
    header = (f"time to {metric.label}: {result['model']} on {result['data']} "
              f"({result['model_bytes'] / 1e6:.1f} MB of gradients), topology="
              f"{result['topology']}, workers/DC={result['workers_per_dc']}, "
              f"target {target_text(result)}"
              + (f", straggler {result['straggler']['dc']} +"
                 f"{result['straggler']['extra_compute_s']:g} s/iter"
                 if result.get("straggler") else ""))
    lines = [header, _row((name for name, _ in COLUMNS), loss)]
    for name, r in result["systems"].items():
        if not r.get("iter_s"):
            lines.append(f"{name:<26}{'-':>6}  {r.get('error', 'failed')}")
            continue
        to_target, final = r.get("time_to_target_s"), r.get("final_quality")
        ppl = r.get("final_perplexity")
        per_sample = r.get("wan_bytes_per_sample")
        util = r.get("compute_utilization")
        lines.append(_row((
            name, r.get("iters", result.get("iters", "-")),
            "never" if to_target is None else f"{to_target:.1f}",
            r.get("iterations_to_target") or "-", r.get("samples_to_target") or "-",
            "-" if final is None else f"{final:.4f}", "-" if ppl is None else f"{ppl:.1f}",
            f"{r['median_s']:.3f}", f"{100 * (r.get('comm_fraction') or 0):.1f}%",
            "-" if util is None else f"{100 * util:.1f}%",
            "-" if per_sample is None else f"{per_sample / 1e3:.1f}",
            "yes" if r["correct"] else "NO"), loss))
    for name, r in result["systems"].items():
        if r.get("wan_bytes_per_outer_round"):
            lines.append(f"WAN bytes per outer round: {name} "
                         f"{r['wan_bytes_per_outer_round'] / 1e6:.2f} MB (one every "
                         f"{r['wan_round_iters']} iterations)")
    versus = result.get("comparisons") or {}
    for c in versus.get("time_to_target", []):
        sooner = c["speedup"] >= 1
        lines.append(f"time to {target_text(result)}: {c['system']} "
                     f"{c['speedup'] if sooner else 1 / c['speedup']:.2f}x "
                     f"{'sooner' if sooner else 'later'} than {c['against']}")
    for c in versus.get("wan_bytes_per_sample", []):
        lines.append(f"WAN bytes per sample: {c['system']} {c['ratio']:.2f}x fewer than "
                     f"{c['against']}")
    return "\n".join(lines)


def plot(result: dict, path: str) -> str:
    """Quality against training wall time and against samples (both log x), one line per
    system (stock MXNet dashed), the target dotted."""
    import matplotlib   # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt   # noqa: PLC0415
    metric = _metric(result)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    target = (result.get("target") or {}).get("value")
    for name, r in result["systems"].items():
        curve = r.get("curve") or []
        if not curve:
            continue
        style = "--" if name.startswith("mxnet") else "-"
        axes[0].plot([p[0] for p in curve], [p[1] for p in curve], label=name, linestyle=style)
        axes[1].plot([p[2] * r.get("samples_per_iter", 1) for p in curve],
                     [p[1] for p in curve], label=name, linestyle=style)
    for ax, xlabel in zip(axes, ("training wall time, s (log scale)",
                                 "samples processed, all workers (log scale)")):
        if target is not None:
            ax.axhline(target, color="k", linewidth=0.8, linestyle=":",
                       label=f"target {target_text(result)}")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    direction = "higher is better" if metric.higher_is_better else "lower is better"
    axes[0].set_ylabel(f"{metric.label}, {direction}")
    axes[1].legend(loc="lower right" if metric.higher_is_better else "upper right",
                   fontsize=8)
    straggler = result.get("straggler")
    fig.suptitle(f"{result['model']} on {result['data']}, topology {result['topology']}, "
                 f"{result['workers_per_dc']} worker(s)/DC" + (
                     f", {straggler['dc']} +{straggler['extra_compute_s']:g} s/iter"
                     if straggler else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
