"""Split trees: partial sums climb one tree, the total descends another, each direction of a
link planned against its own rate.

A shared tree puts its share on both directions of every edge, so on asymmetric links it is
only as good as each edge's slower direction. A split tree pairs an in-arborescence into a
root (aggregation) with an out-arborescence from the same root (broadcast); for every cut,
each direction still carries the whole model once, so the cut bound stays reachable (the
forest packing of Zhang, Wu and Li, INFOCOM 2021, with separate aggregation and broadcast
trees per partition).

:func:`split_packing` is column generation on the share LP (:mod:`.shares`) over every pair
(in-arborescence into r, out-arborescence from r), shared trees included (a shared tree is
such a pair). The LP's duals price each direction; the cheapest pair for a root is the
cheapest in-arborescence plus the cheapest out-arborescence under those prices, each one
Chu-Liu/Edmonds (:mod:`.arborescence`), and the cheapest pair over all roots joins the LP
while it prices below 1. When none does, the shares are optimal over every split and shared
tree. n = DCs.
"""
from __future__ import annotations

import numpy as np

from .arborescence import min_in_arborescence, min_out_arborescence, tree_cost
from .network import Net, edge_key, split_or_shared
from .packing import polish

__all__ = ["FLOOR_QUANTILES", "SPLIT_MAX_DCS", "TIE_BREAK", "price_split", "split_packing",
           "split_pool"]

SPLIT_MAX_DCS = 12        # compute_policy plans split trees up to this many DCs
FLOOR_QUANTILES = (0.0, 0.25)   # split_pool's runs: trees over links at least this fast
TIE_BREAK = 1e-6          # of a direction's price added per 1/c: ties go to faster links


def price_split(net: Net, rows: np.ndarray, duals: np.ndarray, floor: float = 0.0):
    """The tree (split, or shared when both halves have the same edges) with the least
    dual price Σ_d u_d·c_min/c_d over the directions it uses (twice for a direction used
    up and down), over every root: (tree, price). Zero-priced directions are broken in
    favour of faster links. 2n arborescences: O(n^3) at worst, O(n^2) each in practice."""
    n = len(net.dcs)
    flat = net.cap.reshape(-1)
    unit = flat[rows].min()
    price = np.full(n * n, np.inf)
    price[rows] = duals * unit / flat[rows]
    price = price.reshape(n, n)
    price[net.cap < floor] = np.inf
    nudged = price + TIE_BREAK * unit / np.where(net.cap > 0, net.cap, 1.0)
    best = None
    for root in range(n):
        up = min_in_arborescence(nudged, root)
        down = min_out_arborescence(nudged, root)
        value = tree_cost(price, up, inward=True) + tree_cost(price, down, inward=False)
        if best is None or value < best[1] * (1 - 1e-12):
            best = (split_or_shared(up, down), value)
    return best


def split_packing(net: Net, start: list, max_trees: int, rounds: int, floor: float = 0.0):
    """Column generation over split and shared trees from the trees ``start`` (parent
    arrays or :class:`~.network.Split`): ``(trees, shares)`` with shares > 0, at most
    ``max_trees`` of them. O(rounds·(2n arborescences + LP edits))."""
    def price(net, rows, duals):
        return price_split(net, rows, duals, floor)
    trees, shares, _, _, _ = polish(net, list(start), max_trees, rounds, price=price)
    held = [i for i in range(len(trees)) if shares[i] > 0]
    return [trees[i] for i in held], [float(shares[i]) for i in held]


def split_pool(net: Net, start: list, max_trees: int) -> list:
    """Candidate trees for the time model: ``start`` and the trees of :func:`split_packing`
    runs from it (2n + 8 rounds each), one over every link and one over the links at least
    as fast as the quantiles :data:`FLOOR_QUANTILES` of the rates (shallower in time: their
    pipeline fill is smaller), identical trees once. A run whose floor disconnects the DCs
    is skipped. O(runs·(2n + 8)·(2n arborescences + LP edits))."""
    rates = np.unique(net.cap[net.cap > 0])
    pool = {edge_key(t): t for t in start}
    for q in FLOOR_QUANTILES:
        try:
            trees, _ = split_packing(net, start, max_trees, 2 * len(net.dcs) + 8,
                                     floor=float(np.quantile(rates, q)))
        except ValueError:                      # the fast links do not reach every DC
            continue
        for tree in trees:
            pool.setdefault(edge_key(tree), tree)
    return list(pool.values())
