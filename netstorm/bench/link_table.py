"""Where an iteration's time goes, per directed link: bytes carried against the bytes the
time model assigns, and the rate achieved while busy against the emulated rate.

Input: the samples of :class:`~netstorm.bench.link_sampler.LinkSampler` (cumulative bytes
per direction and the rates in force, every ~50 ms) and the measured iterations' start
times (the workers', same monotonic clock). Per direction, over the measured iterations
(the warm-up and start-up left out):

* ``bytes_per_iter``: what left the shaper (frames: payload plus Ethernet/IP/TCP headers,
  plus the ACKs of the opposite direction's data);
* ``assigned_bytes_per_iter``: what the time model puts there (:func:`assigned_bytes`:
  each tree's share of the model once on each aggregation edge, child -> parent, and once
  on each broadcast edge, parent -> child) and ``carried_vs_assigned``, their ratio;
* ``busy_s_per_iter``: the time the link moved data: the sampling intervals in which it
  sent at least :data:`BUSY_FRACTION` of its rate (so a trickle of ACKs or heartbeats does
  not count); ``utilization`` = busy / iteration;
* ``achieved_mbps`` (bytes of the busy intervals over their length) and ``efficiency``,
  its ratio to the emulated rate over the same intervals (about 1.0 when the shaper is
  kept full; below when the sender leaves gaps shorter than a sample);
* ``model_busy_s``: what the time model's busiest-link term charges it (assigned bytes at
  the full rate); ``first_busy_s`` / ``idle_tail_s``: per iteration (mean), how long after
  the iteration began the link first got busy, and how long before the next one began it
  last was (pipeline fill and drain).

Pure arithmetic on lists and dicts; O(samples x links).
"""
from __future__ import annotations

import bisect

__all__ = ["BUSY_FRACTION", "assigned_bytes", "link_table", "measured_links", "summary"]

BUSY_FRACTION = 0.25    # an interval is busy when the link sent >= this part of its rate


def assigned_bytes(trees: list, model_bytes: float) -> dict:
    """``{(a, b): bytes}`` the time model puts on each direction in one iteration: trees as
    JSON (``{"root", "parent", "down"?, "share"}``, as ``fapt_plan`` gives them), each
    carrying ``share`` x ``model_bytes`` once up every aggregation edge (child -> parent) and
    once down every broadcast edge (``down``, else ``parent``'s edges; parent -> child).
    O(trees x DCs)."""
    out: dict = {}
    for tree in trees:
        share = float(tree["share"]) * model_bytes
        for child, parent in tree["parent"].items():
            if parent is not None:
                out[(child, parent)] = out.get((child, parent), 0.0) + share
        for child, parent in (tree.get("down") or tree["parent"]).items():
            if parent is not None:
                out[(parent, child)] = out.get((parent, child), 0.0) + share
    return out


def _at(times: list, values: list, t: float) -> float:
    """The cumulative counter at ``t``, interpolated linearly between samples (clamped)."""
    i = bisect.bisect_left(times, t)
    if i <= 0:
        return values[0]
    if i >= len(times):
        return values[-1]
    t0, t1 = times[i - 1], times[i]
    frac = 0.0 if t1 <= t0 else (t - t0) / (t1 - t0)
    return values[i - 1] + frac * (values[i] - values[i - 1])


def _intervals(samples: list, link, start: float, end: float):
    """``(t0, t1, bytes, rate Mbit/s)`` per sampling interval overlapping [start, end],
    clipped to it (bytes in proportion). Intervals with a missing counter are skipped."""
    for (t0, c0, _), (t1, c1, r1) in zip(samples, samples[1:]):
        a, b = max(t0, start), min(t1, end)
        if b <= a or c0.get(link) is None or c1.get(link) is None:
            continue
        moved = (c1[link] - c0[link]) * (b - a) / (t1 - t0)
        yield a, b, moved, (r1 or {}).get(link, 0.0)


def link_table(samples: list, starts: list, end: float, assigned: dict | None = None,
               rates: dict | None = None) -> list:
    """One row per directed link (busiest first, by ``busy_s_per_iter``) over the measured
    iterations ``starts[0]..end`` (``starts``: each measured iteration's start, monotonic
    seconds; ``end``: when the last one ended). ``assigned``: :func:`assigned_bytes` (None:
    no model figures); ``rates``: Mbit/s per direction for samples that carry none. Links
    that neither carried nor were assigned anything are left out. O(samples x links)."""
    if len(samples) < 2 or not starts or not end > starts[0]:
        return []
    samples = [(t, c, r if r else rates) for t, c, r in samples]
    iterations = len(starts)
    bounds = list(starts) + [end]
    times = [t for t, _, _ in samples]
    assigned = assigned or {}
    rows = []
    for link in sorted(set(samples[-1][1]) | set(assigned)):
        values = [c.get(link) for _, c, _ in samples]
        if any(v is None for v in values):
            continue
        carried = (_at(times, values, end) - _at(times, values, starts[0])) / iterations
        busy_s = busy_bytes = capacity_bits = 0.0
        first, tail = [], []
        for k in range(iterations):
            busy = [(a, b, moved, rate) for a, b, moved, rate in
                    _intervals(samples, link, bounds[k], bounds[k + 1])
                    if rate > 0 and moved * 8 >= BUSY_FRACTION * rate * 1e6 * (b - a)]
            if busy:
                first.append(busy[0][0] - bounds[k])
                tail.append(bounds[k + 1] - busy[-1][1])
            for a, b, moved, rate in busy:
                busy_s += b - a
                busy_bytes += moved
                capacity_bits += rate * 1e6 * (b - a)
        share = assigned.get(link, 0.0)
        if carried <= 0 and share <= 0:
            continue
        rate = samples[-1][2].get(link, 0.0) if samples[-1][2] else 0.0
        rows.append({
            "link": f"{link[0]}->{link[1]}", "mbps": rate,
            "bytes_per_iter": int(round(carried)),
            "assigned_bytes_per_iter": int(round(share)) if assigned else None,
            "carried_vs_assigned": round(carried / share, 4) if share > 0 else None,
            "model_busy_s": round(share * 8 / (rate * 1e6), 3) if share > 0 and rate > 0
            else None,
            "busy_s_per_iter": round(busy_s / iterations, 3),
            "utilization": round(busy_s / (end - starts[0]), 4),
            "achieved_mbps": round(busy_bytes * 8 / busy_s / 1e6, 3) if busy_s else None,
            "efficiency": round(busy_bytes * 8 / capacity_bits, 4) if capacity_bits else None,
            "first_busy_s": round(sum(first) / len(first), 3) if first else None,
            "idle_tail_s": round(sum(tail) / len(tail), 3) if tail else None,
        })
    return sorted(rows, key=lambda r: (-r["busy_s_per_iter"], r["link"]))


def summary(rows: list, top: int = 3) -> str:
    """The busiest ``top`` rows as one readable line each (for the report)."""
    lines = []
    for r in rows[:top]:
        model = (f"carried {r['bytes_per_iter'] / 1e6:.1f} MB/iter = "
                 f"{r['carried_vs_assigned']:.3f}x the model's "
                 f"{r['assigned_bytes_per_iter'] / 1e6:.1f} MB ({r['model_busy_s']:.2f} s)"
                 if r.get("carried_vs_assigned") else
                 f"carried {r['bytes_per_iter'] / 1e6:.1f} MB/iter (none assigned)")
        rate = (f"{r['achieved_mbps']:.1f} Mbit/s = {100 * r['efficiency']:.0f}% of its rate"
                if r.get("achieved_mbps") else "never busy")
        lines.append(f"  {r['link']} ({r['mbps']:g} Mbit/s): {model}; busy "
                     f"{r['busy_s_per_iter']:.2f} s/iter at {rate}; first busy "
                     f"{r['first_busy_s']} s in, idle last {r['idle_tail_s']} s")
    return "\n".join(lines)


def measured_links(samples: list, result: dict, plan: dict | None, model_bytes: int,
                   rates: dict | None = None) -> list:
    """:func:`link_table` over the measured iterations of one system's run (``result``: what
    :func:`~netstorm.bench.measure.collect` read, with the workers' ``_iter_start`` and
    ``_iter_all_s``: comm mode only), the model's figures from ``plan`` (``fapt_plan``'s
    dict, or None). [] when the run says nothing of its iterations' times."""
    starts, lasted = result.get("_iter_start"), result.get("_iter_all_s")
    if not starts or not lasted or len(starts) < 2:
        return []
    assigned = assigned_bytes(plan["trees"], model_bytes) if plan else None
    return link_table(samples, starts[1:], starts[-1] + lasted[-1], assigned, rates)
