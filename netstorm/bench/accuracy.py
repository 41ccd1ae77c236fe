"""``bench.py --mode train``: what a training run measured, per system, and the figures it is
judged by (its quality against wall time and against samples).

Per system (from the workers' result files, :func:`summarize`):

* ``metric`` (``accuracy``: test accuracy, higher is better; ``loss``: validation loss in
  nats per token, lower is better; ``higher_is_better`` says which), ``curve`` ([training
  seconds, value, iteration] from rank 0; ``accuracy_curve`` too for accuracy),
  ``final_quality`` (and ``final_accuracy``, or ``final_loss`` and ``final_perplexity``);
* ``time_to_target_s``, ``iterations_to_target`` and ``samples_to_target`` (iterations x
  batch x workers): the first evaluation at or beyond the target, null if never
  (:func:`apply_target`, once the run's target is known: ``--target-from`` takes it from a
  system's final quality after every system ran);
* ``comm_fraction``: the share of an iteration not spent computing (1 - the busiest rank's
  mean compute seconds / the mean iteration seconds of the slowest rank, warm-up excluded,
  rank 0's evaluation pauses taken out of the iterations they overlap);
* ``compute_utilization``: the share of wall time the workers spend computing (forward and
  backward; the optimizer step is not compute), averaged over ranks; each rank's wall time
  runs from the end of its warm-up iteration to the end of its last, less its overlap
  with rank 0's evaluation pauses (which stall every rank of a synchronous system);
* ``wan_bytes_per_sample`` and ``wan_bytes_per_iter``, set by the benchmark: bytes that
  crossed the emulated WAN during the run (start-up included) per sample / per iteration.

:func:`comparisons`: each netstorm system's speed-up in time to target over each stock MXNet
system and over ``netstorm-fapt`` (dense netstorm), and every system's WAN bytes per sample
against ``mxnet-1ps``'s. The table and the plot are in netstorm.bench.quality_report.
"""
from __future__ import annotations

import math

import numpy as np

from .workloads import METRICS

__all__ = ["DENSE", "apply_target", "comparisons", "compute_utilization", "overlap",
           "summarize", "wan_bytes", "without_pauses"]

DENSE = "netstorm-fapt"         # the dense netstorm system every other is compared with


def overlap(intervals, start: float, end: float) -> float:
    """Seconds of ``[start, end]`` covered by disjoint ``intervals`` ([[a, b], ...])."""
    return float(sum(max(0.0, min(b, end) - max(a, start)) for a, b in intervals))


def without_pauses(r: dict, pauses) -> list:
    """A rank's iteration seconds less their overlap with evaluation ``pauses`` (as is when
    the rank did not say when its iterations began)."""
    starts = r.get("iter_start_monotonic")
    if not starts or not pauses:
        return list(r["iter_s"])
    return [max(0.0, t - overlap(pauses, s, s + t)) for s, t in zip(starts, r["iter_s"])]


def compute_utilization(ranks: list) -> float | None:
    """The mean over ranks of compute seconds / wall seconds, the measured iterations only,
    rank 0's evaluation pauses taken out of every rank's wall time."""
    pauses = [p for r in ranks for p in (r.get("eval_monotonic") or [])]
    shares = []
    for r in ranks:
        window = r.get("window_monotonic")
        if not window or len(r["compute_s"]) < 2:
            continue
        wall = window[1] - window[0] - overlap(pauses, *window)
        if wall > 0:
            shares.append(min(1.0, sum(r["compute_s"][1:]) / wall))
    return round(float(np.mean(shares)), 4) if shares else None


def summarize(ranks: list) -> dict:
    """The train-mode figures from the workers' result files (``ranks``, every rank's dict);
    the target's figures are null until :func:`apply_target`."""
    metric = METRICS[ranks[0].get("metric", "accuracy")]
    curve = next((r["curve"] for r in ranks if r.get("curve")), [])
    pauses = [p for r in ranks for p in (r.get("eval_monotonic") or [])]
    slowest = np.max(np.array([without_pauses(r, pauses) for r in ranks]), axis=0)[1:]
    busiest = np.max(np.array([r["compute_s"] for r in ranks]), axis=0)[1:]
    final = curve[-1][1] if curve else None
    out = {"metric": metric.name, "higher_is_better": metric.higher_is_better, "curve": curve,
           "final_quality": final,
           "samples_per_iter": int(ranks[0].get("batch_size", 0)) * len(ranks),
           "comm_fraction": (round(float(1 - busiest.mean() / slowest.mean()), 4)
                             if len(slowest) and slowest.mean() > 0 else None),
           "compute_s_per_iter": round(float(busiest.mean()), 5) if len(busiest) else None,
           "compute_utilization": compute_utilization(ranks),
           "time_to_target_s": None, "iterations_to_target": None, "samples_to_target": None}
    if metric.name == "accuracy":
        out.update(accuracy_curve=curve, final_accuracy=final)
    else:
        out.update(final_loss=final, final_perplexity=None if final is None else
                   round(math.exp(min(final, 700.0)), 2))
    return out


def apply_target(r: dict, target: float | None) -> dict:
    """Set ``r``'s time, iterations and samples to ``target`` (its metric's direction)."""
    r.update(time_to_target_s=None, iterations_to_target=None, samples_to_target=None)
    if target is None or not r.get("curve"):
        return r
    metric = METRICS[r["metric"]]
    hit = next((p for p in r["curve"] if metric.reached(p[1], target)), None)
    if hit is not None:
        r.update(time_to_target_s=hit[0], iterations_to_target=hit[2],
                 samples_to_target=hit[2] * r["samples_per_iter"])
    return r


def comparisons(systems: dict) -> dict:
    """Ratios between systems: ``time_to_target`` (speed-up: the other's time / this
    one's, for each netstorm system against each ``mxnet-*`` system and against
    netstorm-fapt, both having reached the target) and ``wan_bytes_per_sample`` (how many
    times fewer bytes than ``mxnet-1ps`` per sample)."""
    times = {n: r["time_to_target_s"] for n, r in systems.items() if r.get("time_to_target_s")}
    speedups = [{"system": a, "against": b, "speedup": round(tb / ta, 3)}
                for a, ta in times.items() if a.startswith("netstorm")
                for b, tb in times.items()
                if b.startswith("mxnet") or (b == DENSE and a != DENSE)]
    base = systems.get("mxnet-1ps", {}).get("wan_bytes_per_sample")
    fewer = [{"system": n, "against": "mxnet-1ps",
              "ratio": round(base / r["wan_bytes_per_sample"], 3)}
             for n, r in systems.items() if base and n != "mxnet-1ps"
             and r.get("wan_bytes_per_sample")]
    return {"time_to_target": speedups, "wan_bytes_per_sample": fewer}


def wan_bytes(before: dict, after: dict) -> int:
    """Bytes that left every link's shaper between two ``EmulatedWan.link_bytes()`` reads."""
    return int(sum(sent - before[k] for k, sent in after.items()
                   if sent is not None and before.get(k) is not None))
