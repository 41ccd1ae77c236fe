"""Depth-two split trees for large meshes, packed by multiplicative weights.

On a mesh of many DCs the packings of :mod:`.packing` and :mod:`.split_trees` use deep
trees, and every hop adds a chunk's time to the pipeline fill (about 3 s at 64 DCs), while
stars (:mod:`.shallow`) put a share on every link, the slowest included. A **depth-two**
split tree bounds the fill at two hops up and two down: each DC sends its partial sum to
the root, either directly or through one *hub* that itself sends directly to the root, and
the total comes back down a broadcast tree of the same form (chosen separately, against
the other direction's rates). Hubs let a DC avoid its slow direct link and, because a hub
adds what it receives, the hub-to-root link carries one share however many DCs use it.

* :func:`two_level_parent`: the cheapest such in-tree into a root under per-direction
  costs is uncapacitated facility location (NP-hard), so it searches the hub sets that are
  prefixes of the DCs ordered by their direct cost to the root; for each prefix, every other
  DC takes the cheaper of the root and its cheapest hub. All n - 1 prefixes at once with a
  running minimum: O(n^2).
* :func:`two_level_packing`: multiplicative weights (Garg-Könemann style, as
  :mod:`.packing`). Each of ``rounds`` steps takes the next root in turn, builds its
  cheapest depth-two in- and out-tree under direction costs ``exp(eta·(x_d/x_max - 1))/c_d``
  (x_d: load/rate so far, so the busiest directions grow dear) and gives it a share of
  1/``rounds``. O(rounds·n^2); 0.04 s for 255 rounds at 64 DCs.
* :func:`two_level_candidate`: the packings over a few (eta, slowest usable rate) settings,
  scored by the time model; the slow-link floor trades a busier link for a smaller fill.

The shares are equal by construction (no LP: at 64 DCs the share LP over 255 trees takes
seconds, and equal shares keep every tree's first chunk, hence the fill, small). On
``random_full_mesh(64, seed)`` with 255 trees the busiest link comes within 1.3x of the
volume bound (:func:`~.cut_bound.volume_lower_bound_s`), against 5x for sharded stars.
n = DCs.
"""
from __future__ import annotations

import numpy as np

from .network import Net, edge_key, split_or_shared
from .time_model import predict

__all__ = ["TWO_LEVEL_SETTINGS", "two_level_candidate", "two_level_packing", "two_level_parent"]

TWO_LEVEL_SETTINGS = ((8.0, 0.25), (8.0, 0.4))   # (eta, quantile of the rates below which
                                                 # directions are left out)


def two_level_parent(cost: np.ndarray, root: int):
    """A depth-two in-tree into ``root`` with a low Σ cost[v, parent[v]] (the least over hub
    sets that are prefixes of the DCs sorted by cost[v, root]); ``cost[v, u]`` is the cost
    of direction v -> u (inf: unusable). Read with ``cost.T`` it is an out-tree from the
    root. Returns the parent array (-1 at the root), or None when some DC reaches the root
    neither directly nor through one hub. O(n^2) time and memory."""
    n = cost.shape[0]
    cost = cost.copy()
    np.fill_diagonal(cost, np.inf)
    direct = cost[:, root]
    others = np.delete(np.arange(n), root)
    order = others[np.argsort(direct[others], kind="stable")]
    order = order[np.isfinite(direct[order])]                  # a hub must reach the root
    if order.size == 0:
        return None
    via = np.minimum.accumulate(cost[:, order], axis=1)        # n x hubs: cheapest hub so far
    rank = np.full(n, n)
    rank[order] = np.arange(order.size)
    is_hub = rank[:, None] <= np.arange(order.size)[None, :]
    pay = np.where(is_hub, direct[:, None], np.minimum(direct[:, None], via))
    pay[root] = 0.0
    total = pay.sum(axis=0)
    best = int(np.argmin(total))
    if not np.isfinite(total[best]):
        return None
    hubs = order[:best + 1]
    pick = np.argmin(cost[:, hubs], axis=1)
    through = cost[np.arange(n), hubs[pick]] < direct
    parent = np.where(through, hubs[pick], root).astype(np.int64)
    parent[hubs] = root
    parent[root] = -1
    return parent


def two_level_packing(net: Net, rounds: int, eta: float, floor: float = 0.0):
    """``rounds`` depth-two trees by multiplicative weights over the directions at least
    ``floor`` Mbit/s fast (module docstring): ``(trees, shares)``, identical trees merged,
    shares summing to 1. Raises ValueError when some root has no depth-two tree over those
    directions. O(rounds·n^2)."""
    n = len(net.dcs)
    usable = net.cap >= max(floor, 1e-300)
    inverse = np.where(usable, 1.0 / np.where(usable, net.cap, 1.0), 0.0)
    load = np.zeros((n, n))
    found = {}
    step = 1.0 / rounds
    for i in range(rounds):
        root = i % n
        busy = load * inverse
        top = busy.max()
        cost = inverse * np.exp(eta * (busy / top - 1.0)) if top > 0 else inverse.copy()
        cost[~usable] = np.inf
        up, down = two_level_parent(cost, root), two_level_parent(cost.T, root)
        if up is None or down is None:
            raise ValueError(f"{net.dcs[root]} has no depth-two tree over links of at "
                             f"least {floor:g} Mbit/s")
        tree = split_or_shared(up, down)
        key = edge_key(tree)
        found[key] = (tree, found[key][1] + step) if key in found else (tree, step)
        child = np.flatnonzero(up >= 0)
        load[child, up[child]] += step
        child = np.flatnonzero(down >= 0)
        load[down[child], child] += step
    trees = [tree for tree, _ in found.values()]
    shares = np.array([share for _, share in found.values()])
    return trees, list(shares / shares.sum())


def two_level_candidate(net: Net, max_trees: int, model_bytes: float, chunk_bytes: float):
    """The best predicted :func:`two_level_packing` (``max_trees`` rounds) over
    :data:`TWO_LEVEL_SETTINGS`: ``(trees, shares, predicted, busy)`` as
    :func:`~.compute.compute_policy` scores candidates, or None when no setting gives
    every root a depth-two tree (a sparse mesh). O(settings·max_trees·n^2)."""
    rates = net.cap[net.cap > 0]
    best = None
    for eta, quantile in TWO_LEVEL_SETTINGS:
        try:
            trees, shares = two_level_packing(net, max_trees, eta,
                                              float(np.quantile(rates, quantile)))
        except ValueError:
            continue
        predicted, busy = predict(net, trees, shares, model_bytes, chunk_bytes)
        if best is None or predicted < best[2] * (1 - 1e-12):
            best = (trees, shares, predicted, busy)
    return best
