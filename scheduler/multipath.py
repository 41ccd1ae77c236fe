"""Multipath: let links the trees leave idle carry part of the busiest links' chunks.

A chunk on tree link u -> v may be split: a fraction travels u -> w -> v through a relay DC w that
only forwards (no aggregation), the rest goes direct; the receiver reassembles
(:mod:`netstorm.geoserver.server.wan.reassembly`). :func:`plan_relays` chooses, for the policy's
link loads under the current rates, which directions shed how much through which relay, so that the
direct part and the relayed part take equally long: repeatedly, the busiest direction moves bytes to
the two-hop path that ends lowest, exactly until the two are level (water filling). Pure function;
O(steps · n) with ``steps`` at most ``max_steps``.

A relay pays for itself or is not planned. A relayed byte crosses two links instead of one
and costs the relay DC a receive and a send besides: each relayed Mbit is charged
``1 + overhead`` Mbit on both of its hops (:data:`RELAY_OVERHEAD`). A relay share below
:data:`MIN_FRACTION` of its direction's traffic is dropped, and a plan that does not lower the
busiest direction by at least ``min_gain`` (:data:`MIN_GAIN`, relative) is no plan: relays
sent on noisy estimates for a few percent cost more in messages and CPU than they gain.
"""
from __future__ import annotations

__all__ = ["MIN_FRACTION", "MIN_GAIN", "RELAY_OVERHEAD", "plan_relays", "predicted_busiest_s",
           "to_json"]

MIN_FRACTION = 0.05        # smaller relay shares are not worth a second message per chunk
MIN_GAIN = 0.05            # a relay plan must lower the busiest direction by this much
RELAY_OVERHEAD = 0.1       # a relayed Mbit costs this much more on each of its two hops


def plan_relays(busy_s: dict, rates: dict, max_steps: int = 64,
                min_gain: float = MIN_GAIN, overhead: float = RELAY_OVERHEAD) -> dict:
    """``{(u, v): [(w, fraction), ...]}`` for directions worth splitting.

    ``busy_s``: the policy's seconds per direction
    (:func:`netstorm.scheduler.planning.link_loads`); ``rates``: Mbit/s per direction
    (every usable direction, idle ones included). A step stops the busiest direction from
    being the bottleneck by at least ``min_gain`` (relative) or the planning ends; if the
    busiest direction overall did not get faster by ``min_gain``, the plan is empty.
    Fractions are of the direction's own tree traffic and sum to < 1 per direction.
    """
    busy = {d: float(busy_s.get(d, 0.0)) for d in rates}
    own = {d: busy_s.get(d, 0.0) * rates[d] for d in rates}       # tree traffic, Mbit
    moved: dict = {}
    neighbours: dict = {}
    for u, v in rates:
        neighbours.setdefault(u, set()).add(v)
    for _ in range(max_steps):
        u, v = max(busy, key=lambda d: (busy[d], d))
        peak = busy[(u, v)]
        if peak <= 0:
            break
        left = own[(u, v)] - sum(moved.get((u, v), {}).values())   # Mbit still direct
        best = None
        for w in sorted(neighbours.get(u, ())):
            if w == v or (w, v) not in rates:
                continue
            k_e = 1 / rates[(u, v)]
            k_1, k_2 = (1 + overhead) / rates[(u, w)], (1 + overhead) / rates[(w, v)]
            # x Mbit moved: direct falls by x·k_e, each relay hop rises by x·k
            x = min((peak - busy[(u, w)]) / (k_e + k_1), (peak - busy[(w, v)]) / (k_e + k_2),
                    left)
            if x > 0 and (best is None or peak - x * k_e < best[0]):
                best = (peak - x * k_e, w, x)
        if best is None or best[0] > peak * (1 - min_gain):
            break
        new_peak, w, x = best
        busy[(u, v)] = new_peak
        busy[(u, w)] += x * (1 + overhead) / rates[(u, w)]
        busy[(w, v)] += x * (1 + overhead) / rates[(w, v)]
        moved.setdefault((u, v), {})
        moved[(u, v)][w] = moved[(u, v)].get(w, 0.0) + x
    plan = {}
    for direction, via in moved.items():
        parts = [(w, x / own[direction]) for w, x in sorted(via.items())
                 if own[direction] > 0 and x / own[direction] >= MIN_FRACTION]
        if parts:
            plan[direction] = parts
    before = max(busy_s.get(d, 0.0) for d in rates) if rates else 0.0
    if predicted_busiest_s(busy_s, rates, plan, overhead) > before * (1 - min_gain):
        return {}          # another direction at the peak cannot shed: relays buy nothing
    return plan


def predicted_busiest_s(busy_s: dict, rates: dict, plan: dict,
                        overhead: float = RELAY_OVERHEAD) -> float:
    """The busiest direction's seconds once ``plan`` is applied, relayed bytes charged
    ``1 + overhead`` on their two hops (to compare with the trees' own busiest link).
    O(E + relays)."""
    busy = {d: float(busy_s.get(d, 0.0)) for d in rates}
    for (u, v), parts in plan.items():
        own = busy_s.get((u, v), 0.0) * rates[(u, v)]
        for w, fraction in parts:
            x = own * fraction
            busy[(u, v)] -= x / rates[(u, v)]
            busy[(u, w)] += x * (1 + overhead) / rates[(u, w)]
            busy[(w, v)] += x * (1 + overhead) / rates[(w, v)]
    return max(busy.values(), default=0.0)


def to_json(plan: dict) -> list:
    """``[[u, v, w, fraction], ...]`` for the ROUTES message."""
    return [[u, v, w, round(f, 4)] for (u, v), parts in sorted(plan.items()) for w, f in parts]
