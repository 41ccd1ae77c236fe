"""The cut lower bound: no all-reduce over the WAN can be faster than its narrowest cut.

Every spanning tree crosses every cut, so the busiest-link term of the time model
(:mod:`.time_model`) is never below this bound; benchmarks report their times against it.
"""
from __future__ import annotations

import math

import networkx as nx
import numpy as np

from ..topology import Topology, TopologyError

__all__ = ["MAX_CUT_DCS", "cut_lower_bound", "cut_lower_bound_s", "lower_bound_s",
           "volume_lower_bound_s"]

MAX_CUT_DCS = 22                   # exact enumeration of 2^(n-1) cuts up to this many DCs,
                                   # max-flows above


def cut_lower_bound(topology: Topology, model_bytes: float):
    """Lower bound on the time of one all-reduce of ``model_bytes`` over the WAN.

    For a cut (S, V\\S), each side must receive the other side's contribution, so at least
    ``model_bytes`` crosses the cut in each direction; with cap(S->rest) the summed Mbit/s of
    links from S to the rest, the cut needs ``model_bytes * 8 / (1e6 * min(cap(S->rest),
    cap(rest->S)))`` seconds. The bound is the maximum over every cut. Returns
    ``(seconds, S)`` where S is the bottleneck cut's smaller side (ties: the side with
    ``dcs[0]``); between equal cuts the first in enumeration order wins (capacities are
    compared rounded to 1e-6 Mbit/s so float noise cannot reorder them).

    Up to :data:`MAX_CUT_DCS` DCs, exact enumeration of the 2^(V-1) - 1 cuts, each O(V^2)
    numpy work in blocks: O(2^V * V^2) time, O(V^2 + block) memory (about 0.1 s at 20 DCs,
    0.5 s at 22). Above, the same bound from max-flows (:func:`_flow_cut`; the bottleneck
    side may then be another of several equal cuts).
    """
    if not model_bytes > 0:
        raise TopologyError(f"model_bytes must be > 0, got {model_bytes!r}")
    side = _enumerated_cut(topology) if len(topology.dcs) <= MAX_CUT_DCS \
        else _flow_cut(topology)
    if len(side) * 2 > len(topology.dcs):
        side = frozenset(topology.dcs) - side
    out_exact = sum(l.rate(a, b) for l in topology.links for a, b in ((l.a, l.b), (l.b, l.a))
                    if a in side and b not in side)
    in_exact = sum(l.rate(a, b) for l in topology.links for a, b in ((l.a, l.b), (l.b, l.a))
                   if b in side and a not in side)
    return model_bytes * 8 / (1e6 * min(out_exact, in_exact)), side


def _flow_cut(topology: Topology) -> frozenset:
    """A side S of a cut with the least min(cap(S->rest), cap(rest->S)), from max-flows:
    every cut separates ``dcs[0]`` from some t one way or the other, so the least such cut
    is the least of the 2(V-1) minimum s-t and t-s cuts. O(V) max-flows (networkx's
    preflow-push, O(V^2 sqrt(E)) each): about a second at 64 DCs."""
    graph = topology.graph()
    source = topology.dcs[0]
    best, side = math.inf, frozenset()
    for other in topology.dcs[1:]:
        for s, t in ((source, other), (other, source)):
            value, (reach, _) = nx.minimum_cut(graph, s, t, capacity="mbps")
            if value < best - 1e-9:
                best, side = value, frozenset(reach)
    return side


def _enumerated_cut(topology: Topology) -> frozenset:
    """The side (containing ``dcs[0]``) of the first cut with the least
    min(cap(S->rest), cap(rest->S)) in enumeration order. O(2^V · V^2)."""
    n = len(topology.dcs)
    index = {dc: i for i, dc in enumerate(topology.dcs)}
    rate = np.zeros((n, n))
    for link in topology.links:
        rate[index[link.a], index[link.b]] = link.mbps_ab
        rate[index[link.b], index[link.a]] = link.mbps_ba
    out_sum, in_sum = rate.sum(axis=1), rate.sum(axis=0)
    bits = np.arange(n, dtype=np.int64)
    best_cap, best_mask = math.inf, 0
    total = 1 << (n - 1)                  # masks with bit 0 (dcs[0]) set, except all-of-V
    block = 1 << 15
    for start in range(0, total, block):
        low = np.arange(start, min(start + block, total), dtype=np.int64)
        masks = (low << 1) | 1
        member = ((masks[:, None] >> bits) & 1).astype(float)         # block x n
        inner = ((member @ rate) * member).sum(axis=1)                # within S
        out_cap, in_cap = member @ out_sum - inner, member @ in_sum - inner
        cap = np.round(np.minimum(out_cap, in_cap), 6)
        cap[masks == (1 << n) - 1] = math.inf                         # S = V is no cut
        pos = int(np.argmin(cap))
        if cap[pos] < best_cap:
            best_cap, best_mask = float(cap[pos]), int(masks[pos])
    return frozenset(dc for dc, i in index.items() if best_mask >> i & 1)


def cut_lower_bound_s(topology: Topology, model_bytes: float) -> float:
    """The seconds of :func:`cut_lower_bound` alone; the same cost."""
    return cut_lower_bound(topology, model_bytes)[0]


def volume_lower_bound_s(topology: Topology, model_bytes: float) -> float:
    """Lower bound from the total bytes an all-reduce must move: 2(V-1)·B over the sum of
    every direction's rate, ``2·(V-1)·8·B / (1e6·Σ_d c_d)`` seconds.

    Why 2(V-1)·B: take any element of the model and the first DC w to know its total. Every
    other DC sent something about the element before that moment (w needs its value) and
    received something after it (it did not know the total yet), so at least V-1 sends
    precede it and V-1 other sends follow it, each at least the element's size (sums are
    not compressed here). On dense meshes this exceeds the cut bound: every DC must send
    about 2B in all while a single cut sees only B (``random_full_mesh(64, seed)``: 1.7-1.9x
    the cut bound), so no policy there gets within 1.7x of :func:`cut_lower_bound`.
    O(links)."""
    if not model_bytes > 0:
        raise TopologyError(f"model_bytes must be > 0, got {model_bytes!r}")
    total = sum(l.mbps_ab + l.mbps_ba for l in topology.links)
    return 2 * (len(topology.dcs) - 1) * model_bytes * 8 / (1e6 * total)


def lower_bound_s(topology: Topology, model_bytes: float) -> float:
    """The larger of :func:`cut_lower_bound_s` and :func:`volume_lower_bound_s`: no
    all-reduce of ``model_bytes`` over ``topology`` is faster. O(cut_lower_bound)."""
    return max(cut_lower_bound_s(topology, model_bytes),
               volume_lower_bound_s(topology, model_bytes))
