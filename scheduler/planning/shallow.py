"""Shallow trees: the least-depth tree per root. Pipeline fill grows with depth, so these
are the candidates that keep fill small; on a full mesh they are the stars. n = DCs."""
from __future__ import annotations

import math

import numpy as np

from netstorm.geoserver.policy.tree import Tree

from .network import Net, as_net, dc_index, to_tree

__all__ = ["shallow_parent", "shallow_tree"]


def shallow_parent(net: Net, root: int) -> np.ndarray:
    """Hop-shortest-path tree into ``root``, each DC's parent chosen (level by level) to
    maximise the bottleneck of its path among the hop-shortest ones; ties to the lower
    index. (hops, -bottleneck) is isotone, so level-by-level choice is exact. O(n^2)."""
    n = len(net.dcs)
    width = np.minimum(net.cap, net.cap.T)
    parent = np.full(n, -1, dtype=np.int64)
    best = np.full(n, -math.inf)
    best[root] = math.inf
    seen = np.zeros(n, dtype=bool)
    seen[root] = True
    level = np.array([root])
    while level.size:
        reach = (width[level] > 0) & ~seen                  # |level| x n
        nxt = np.flatnonzero(reach.any(axis=0))
        if not nxt.size:
            break
        cand = np.where(reach[:, nxt], np.minimum(best[level][:, None], width[level][:, nxt]),
                        -math.inf)
        pick = np.argmax(cand, axis=0)                      # first max: lowest index
        parent[nxt] = level[pick]
        best[nxt] = cand[pick, np.arange(nxt.size)]
        seen[nxt] = True
        level = nxt
    return parent


def shallow_tree(graph, root: str) -> Tree:
    """The least-depth tree rooted at ``root``: every DC on a hop-shortest path to the
    root, the widest such path (bottleneck of the slower directions) where there is a
    choice. In a full mesh it is the star at ``root``. Pipeline fill grows with depth, so
    these are the candidates that keep fill small (:func:`~.compute.compute_policy`'s ``shallow``
    method gives every root one, with LP shares: on a full mesh, a sharded star). O(n^2)."""
    net = as_net(graph)
    return to_tree(net, shallow_parent(net, dc_index(net, root)))
