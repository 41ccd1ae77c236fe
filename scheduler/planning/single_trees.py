"""The best single tree (share 1): the maximum-bottleneck spanning tree, every star and
every FAPT tree, scored by the time model. n = DCs, m = usable links."""
from __future__ import annotations

import numpy as np

from .fapt import fapt_all
from .network import Net, as_net, inverse, mst, to_tree
from .roots import best_root_parent
from .time_model import DEFAULT_CHUNK_BYTES, NOMINAL_MODEL_BYTES, predict

__all__ = ["best_single", "best_single_tree", "best_star", "single_candidates"]


def _stars(net: Net) -> list:
    """The star at every hub linked to every DC. O(n^2)."""
    n = len(net.dcs)
    out = []
    for hub in range(n):
        if int((net.cap[hub] > 0).sum()) == n - 1:
            parent = np.full(n, hub, dtype=np.int64)
            parent[hub] = -1
            out.append(parent)
    return out


def best_single(net: Net, parents, model_bytes, chunk_bytes):
    """``(parent, predicted_s)`` of the tree with the least predicted time alone (ties: the
    first), or None without trees. O(k·n)."""
    best = None
    for parent in parents:
        t = predict(net, [parent], [1.0], model_bytes, chunk_bytes)[0]
        if best is None or t < best[1]:
            best = (parent, t)
    return best


def best_star(topology_or_graph, model_bytes: float = NOMINAL_MODEL_BYTES,
              chunk_bytes: float = DEFAULT_CHUNK_BYTES):
    """The star (every DC's parent is the hub, as ``netstorm.scheduler.policy.star_policy``)
    with the least predicted time over the hubs linked to every DC, ties to the lowest index:
    ``(Tree, predicted_s)``, or None if no DC is linked to all others. O(n^2)."""
    net = as_net(topology_or_graph)
    best = best_single(net, _stars(net), model_bytes, chunk_bytes)
    return None if best is None else (to_tree(net, best[0]), best[1])


def single_candidates(net: Net, fapt=None) -> list:
    """The maximum-bottleneck spanning tree at its best root, every star, every FAPT tree
    (``fapt``: those of :func:`~.fapt.fapt_all` if already built). O(n·m log n + n^2)."""
    mbst = mst(inverse(np.minimum(net.cap, net.cap.T), np.inf))
    return [best_root_parent(net, mbst)] + _stars(net) + (fapt_all(net) if fapt is None else fapt)


def best_single_tree(topology_or_graph, model_bytes: float = NOMINAL_MODEL_BYTES,
                     chunk_bytes: float = DEFAULT_CHUNK_BYTES):
    """The single tree (share 1) with the least predicted time among the maximum-bottleneck
    spanning tree (an MST on 1/min(c(u->v), c(v->u)); it minimises the busiest link of any
    one tree) at its best root, every star, every FAPT tree; ties to the first in that
    order. ``(Tree, predicted_s)``. O(n·m log n + n^2)."""
    net = as_net(topology_or_graph)
    best = best_single(net, single_candidates(net), model_bytes, chunk_bytes)
    return to_tree(net, best[0]), best[1]
