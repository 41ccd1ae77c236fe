"""Rate traces for the emulated WAN: when each link direction changes rate, and to what.

A trace is ``[(t_s, {(a, b): mbps, ...}), ...]`` sorted by time. Pure: no processes.
"""
from __future__ import annotations

import math

import numpy as np

from netstorm.scheduler.topology import Link, Rates, Topology, TopologyError

from .builtin import load_topology

__all__ = ["PAPER9_FLUCTUATING_SEED", "TRACES", "Trace", "fluctuating_trace", "load_trace",
           "mean_rates", "rates_at"]

PAPER9_FLUCTUATING_SEED = 180

Trace = list  # [(t_s, Rates)], sorted by t_s


def fluctuating_trace(topology: Topology, period_s: float, duration_s: float, low: float,
                      high: float, seed: int, symmetric: bool = False) -> Trace:
    """Every ``period_s`` (from t = 0 while t < ``duration_s``) every link gets a new rate.

    Rates are uniform in [low, high) Mbit/s from ``numpy.random.default_rng(seed)``, rounded
    to 0.1; each direction is drawn independently unless ``symmetric``. Returns
    ``[(t_s, {(a, b): mbps_ab, (b, a): mbps_ba, ...}), ...]`` sorted by time.
    O(duration_s / period_s * E).
    """
    if not period_s > 0 or not duration_s > 0:
        raise TopologyError(f"trace needs period_s > 0 and duration_s > 0, "
                            f"got {period_s!r} and {duration_s!r}")
    if not 0 < low <= high:
        raise TopologyError(f"trace needs 0 < low <= high, got low={low!r} high={high!r}")
    rng = np.random.default_rng(seed)
    steps = math.ceil(duration_s / period_s - 1e-9)
    trace = []
    for step in range(steps):
        draws = rng.uniform(low, high, size=(len(topology.links), 2))
        rates = {}
        for link, (ab, ba) in zip(topology.links, draws):
            rates[(link.a, link.b)] = round(float(ab), 1)
            rates[(link.b, link.a)] = round(float(ab if symmetric else ba), 1)
        trace.append((step * period_s, rates))
    return trace


TRACES = ("paper9-fluctuating",)


def load_trace(name: str, period_s: float = 180.0, duration_s: float = 3600.0,
               seed: int = PAPER9_FLUCTUATING_SEED) -> Trace:
    """A named dynamic trace.

    ``paper9-fluctuating``: :func:`paper9_topology`'s links, each with a new rate (the same
    both ways, as in ``paper9``) uniform in [20, 155) Mbit/s every ``period_s`` (the paper
    used 180 s, the default here too; shorter periods make a harder test of re-planning).
    """
    if name == "paper9-fluctuating":
        return fluctuating_trace(load_topology("paper9"), period_s, duration_s, 20.0, 155.0,
                                 seed, symmetric=True)
    raise TopologyError(f"unknown trace {name!r}; known: {', '.join(TRACES)}")


def rates_at(trace: Trace, t_s: float, base: Rates = None) -> Rates:
    """The rates in effect at time ``t_s``: ``base`` updated by every change at or before it.
    O(len(trace) * E)."""
    current = dict(base or {})
    for t, rates in sorted(trace, key=lambda item: item[0]):
        if t > t_s:
            break
        current.update(rates)
    return current


def mean_rates(trace: Trace, duration_s: float, topology: Topology = None) -> Topology:
    """The time-weighted mean of every direction's rate over [0, ``duration_s``).

    A rate set at ``t`` holds until that direction's next change (changes at or after
    ``duration_s`` are ignored). With ``topology``, its rates hold until a direction's first
    change and the result keeps its name, DC and link order; without it, every direction
    must be set at t = 0 and DCs and links are taken in order of first appearance.
    O(len(trace) * E).
    """
    if not duration_s > 0:
        raise TopologyError(f"mean_rates needs duration_s > 0, got {duration_s!r}")
    changes = sorted(trace, key=lambda item: item[0])
    if topology is None:
        if not changes or changes[0][0] != 0:
            raise TopologyError("mean_rates: the trace does not start at t = 0; pass the "
                                "topology whose rates hold before the first change")
        current, dcs, pairs = {}, [], []
        for _, rates in changes:
            for a, b in rates:
                for dc in (a, b):
                    if dc not in dcs:
                        dcs.append(dc)
                if (b, a) not in pairs and (a, b) not in pairs:
                    pairs.append((a, b))
        missing = [p for pair in pairs for p in (pair, pair[::-1]) if p not in changes[0][1]]
        if missing:
            raise TopologyError(f"mean_rates: directions {missing} are not set at t = 0; "
                                f"pass the topology whose rates hold before")
        name = "mean"
    else:
        current = topology.rates()
        dcs, pairs, name = list(topology.dcs), [(l.a, l.b) for l in topology.links], topology.name
        for _, rates in changes:
            for direction in rates:
                if direction not in current:
                    raise TopologyError(f"{topology.source}: the trace sets {direction[0]} -> "
                                        f"{direction[1]}, which is not a link")
    area = {direction: 0.0 for direction in current} if topology else {}
    last_t = 0.0
    for t, rates in changes:
        if t >= duration_s:
            break
        for direction, mbps in current.items():
            area[direction] = area.get(direction, 0.0) + mbps * (t - last_t)
        current.update(rates)
        last_t = max(t, 0.0)
    for direction, mbps in current.items():
        area[direction] = area.get(direction, 0.0) + mbps * (duration_s - last_t)
    return Topology(name, tuple(dcs),
                    tuple(Link(a, b, area[(a, b)] / duration_s, area[(b, a)] / duration_s)
                          for a, b in pairs))
