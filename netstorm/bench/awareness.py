"""How well netstorm saw a changing WAN: its scheduler's stats log against the emulator's truth.

Used by scripts/bench.py under ``--dynamic`` for the adaptive systems. The scheduler writes
one JSON line per second (``event: rates``: every direction's estimate, its age, the round)
and one per policy (``event: policy``). The trace runner records when each rate change took
effect. Both use this machine's monotonic clock.

* :func:`estimate_errors`: |estimate - true| / true for every fresh estimate (measured at
  most ``max_age_s`` before the record, i.e. a link that carried traffic), against the rate
  the emulator had set when it was measured; each measurement counted once. The summary
  gives their median and the largest estimate / true (``awareness_max_overestimate``), the
  same over estimates measured at least :data:`SETTLE_S` after their link's last change
  (``awareness_max_overestimate_settled``: what is left once a change had time to reach
  the estimate, i.e. reading errors rather than lag) and the worst estimate itself.
* :func:`reactions`: for every rate change, the round in progress when it took effect and
  the first round of the next re-planned policy, if one was announced before the next change.
* :func:`round_costs`: for every round, the measured time beside the time model's prediction
  for the policy that was in force, at the rates the emulator had set (what the policy was
  worth), and for the best policy at those rates (what a policy chosen with no delay and
  exact estimates would have been worth). Measured over the first is what the
  implementation lost; the first over the second is what stale or late policies lost.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from netstorm.geoserver.policy.tree import Policy, PolicyBook, PolicyError
from netstorm.scheduler.planning import compute_policy, predict_iteration_s

__all__ = ["SETTLE_S", "estimate_errors", "logged_policies", "plot_estimates", "reactions",
           "read_stats", "round_at", "round_costs", "round_costs_summary", "summary"]


SETTLE_S = 3.0     # a link's monitor needs this long to follow a change: the median of
                   # three 0.5 s windows (one window late) and smoothing with tau 1.5 s


def _last_change(runner, direction: tuple, t_s: float) -> float | None:
    """When ``direction``'s rate last changed at or before ``t_s`` (runner seconds), None if
    it never did. O(changes)."""
    last, value = None, None
    for change in list(runner.applied):
        if change.t_s > t_s:
            break
        new = change.rates.get(direction, value)
        if new != value:
            last, value = change.t_s, new
    return last


def read_stats(path) -> list:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def estimate_errors(records: list, runner, max_age_s: float = 2.0) -> list:
    """``[(t_s since trace start, 'a->b', estimate, true, rel_error, seconds since that
    direction's rate last changed (None: never))]``."""
    seen, out = set(), []
    for rec in records:
        if rec.get("event") != "rates":
            continue
        for direction, (mbps, age, stalled) in rec["rates"].items():
            if age is None or stalled or age > max_age_s:
                continue
            measured = rec["t"] - age - runner.started
            key = (direction, round(measured, 2))
            if key in seen or measured < 0:
                continue
            seen.add(key)
            a, b = direction.split("->")
            true = runner.rates_at(measured).get((a, b))
            if true:
                changed = _last_change(runner, (a, b), measured)
                out.append((measured, direction, mbps, true, abs(mbps - true) / true,
                            None if changed is None else measured - changed))
    return out


def round_at(records: list, t_abs: float) -> int | None:
    """The latest round reported at or before monotonic time ``t_abs``."""
    best = None
    for rec in records:
        if rec.get("event") == "rates" and rec["t"] <= t_abs:
            best = rec["round"]
    return best


def reactions(records: list, runner) -> list:
    """``[{"t_s", "round", "new_policy_round" or None, "iterations" or None}]`` per change
    after the first (the first sets the starting rates)."""
    policies = [r for r in records if r.get("event") == "policy" and r["reason"] == "re-planned"]
    changes = [c.t_s for c in runner.applied]
    out = []
    for i, t in enumerate(changes[1:], 1):
        t_abs = runner.started + t
        until = runner.started + changes[i + 1] if i + 1 < len(changes) else float("inf")
        rnd = round_at(records, t_abs)
        nxt = next((p for p in policies if t_abs <= p["t"] < until), None)
        start = None if nxt is None else nxt["start_round"]
        out.append({"t_s": round(t, 1), "round": rnd, "new_policy_round": start,
                    "iterations": None if start is None or rnd is None else start - rnd})
    return out


def logged_policies(records: list, dcs) -> PolicyBook:
    """Every policy in the stats log (shares re-normalised: the log rounds them)."""
    book = PolicyBook()
    for rec in records:
        if rec.get("event") == "policy":
            shares = [t["share"] for t in rec["trees"]]
            book.add(Policy.from_json({"version": rec["version"],
                                       "start_round": rec["start_round"], "trees": rec["trees"],
                                       "shares": [x / sum(shares) for x in shares]}, dcs))
    return book


def round_costs(records: list, runner, topology, iter_start: list, iter_s: list,
                model_bytes: float, chunk_bytes: float) -> list:
    """``[{"round", "measured_s", "version", "in_force_s", "best_s"}]`` for every round after
    the first (iteration i pushes round i + 1), each judged at the rates set at the round's
    middle. O(rounds · compute_policy)."""
    book, out = logged_policies(records, topology.dcs), []
    for i, (start, took) in enumerate(zip(iter_start, iter_s)):
        rnd = i + 1
        if rnd == 1:
            continue
        try:
            policy = book.for_round(rnd)    # as the servers choose it
        except PolicyError:                 # nothing logged for this round
            continue
        truth = topology.with_rates(runner.rates_at(start + took / 2 - runner.started))
        out.append({"round": rnd, "measured_s": round(took, 3), "version": policy.version,
                    "in_force_s": round(predict_iteration_s(policy, truth, model_bytes,
                                                            chunk_bytes), 3),
                    "best_s": round(compute_policy(truth, model_bytes,
                                                   chunk_bytes).predicted_s, 3)})
    return out


def round_costs_summary(rows: list) -> dict:
    """Medians of the ratios :func:`round_costs` separates."""
    if not rows:
        return {}
    med = lambda xs: round(float(np.median(xs)), 3)      # noqa: E731
    return {"median_measured_over_in_force": med([r["measured_s"] / r["in_force_s"]
                                                   for r in rows]),
            "median_in_force_over_best": med([r["in_force_s"] / r["best_s"] for r in rows]),
            "mean_measured_s": round(float(np.mean([r["measured_s"] for r in rows])), 3),
            "mean_in_force_s": round(float(np.mean([r["in_force_s"] for r in rows])), 3),
            "mean_best_s": round(float(np.mean([r["best_s"] for r in rows])), 3)}


def summary(stats_path, runner) -> dict:
    records = read_stats(stats_path)
    errors = estimate_errors(records, runner)
    react = reactions(records, runner)
    reacted = [r["iterations"] for r in react if r["iterations"] is not None]
    settled = [e for e in errors if e[5] is None or e[5] >= SETTLE_S]
    worst = None
    if errors:
        t, direction, est, true, _, since = max(errors, key=lambda e: e[2] / e[3])
        worst = {"t_s": round(t, 2), "direction": direction, "estimate": round(est, 2),
                 "true": round(true, 2),
                 "since_change_s": None if since is None else round(since, 2)}
    return {"awareness_median_rel_error": (round(float(np.median([e[4] for e in errors])), 4)
                                           if errors else None),
            # the worst an estimate overstated its link (a receiver draining its buffers,
            # or an estimate that had not yet followed a drop)
            "awareness_max_overestimate": (round(max(e[2] / e[3] for e in errors), 3)
                                           if errors else None),
            "awareness_max_overestimate_settled": (round(max(e[2] / e[3] for e in settled), 3)
                                                   if settled else None),
            "awareness_worst_overestimate": worst,
            "estimates": len(errors),
            "policy_switches": sum(1 for r in records if r.get("event") == "policy"
                                   and r["reason"] == "re-planned"),
            "reactions": react,
            "max_reaction_iterations": max(reacted) if reacted else None,
            "_errors": errors}


def plot_estimates(errors: list, path: str, links: int = 4) -> str:
    """Estimated against true rate over time for the ``links`` most measured directions."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    counts = {}
    for _, direction, *_ in errors:
        counts[direction] = counts.get(direction, 0) + 1
    chosen = sorted(counts, key=lambda d: -counts[d])[:links]
    fig, axes = plt.subplots(len(chosen) or 1, 1, figsize=(7, 2.2 * max(1, len(chosen))),
                             squeeze=False)
    for ax, direction in zip(axes.flat, chosen):
        pts = sorted((t, est, true) for t, d, est, true, *_ in errors if d == direction)
        t = [p[0] for p in pts]
        ax.plot(t, [p[2] for p in pts], drawstyle="steps-post", color="k", label="set by emulator")
        ax.plot(t, [p[1] for p in pts], "o", markersize=3, color="#d62728", label="estimated")
        ax.set_ylabel(f"{direction}\nMbit/s")
        ax.set_ylim(bottom=0)
    axes.flat[0].legend(loc="upper right", fontsize=8)
    axes.flat[-1].set_xlabel("seconds since the trace started")
    fig.suptitle("passive link estimates against the emulated rates")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
