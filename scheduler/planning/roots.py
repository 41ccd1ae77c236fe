"""Where to root a tree: link loads do not depend on a tree's root, only its pipeline fill
does (:mod:`.time_model`), so every tree is rooted where its fill is least."""
from __future__ import annotations

import numpy as np

from netstorm.geoserver.policy.tree import Tree

from .network import Net, as_net, parent_array, to_tree

__all__ = ["best_root", "best_root_parent", "path_costs", "reroot"]


def path_costs(net: Net, parent: np.ndarray) -> np.ndarray:
    """P[a, b] = Σ 1/c over the hops of the tree path a -> b, for all pairs. O(n^2)."""
    n = len(parent)
    adj = [[] for _ in range(n)]
    for i, p in enumerate(parent):
        if p >= 0:
            adj[i].append(int(p))
            adj[int(p)].append(i)
    order, via, seen = [0], {0: -1}, {0}
    for node in order:                     # BFS from DC 0
        for nxt in adj[node]:
            if nxt not in seen:
                seen.add(nxt)
                via[nxt] = node
                order.append(nxt)
    P = np.zeros((n, n))
    for k in range(1, n):
        x, p = order[k], via[order[k]]
        done = order[:k]                   # none of them lies beyond x, seen from DC 0
        P[done, x] = P[done, p] + 1.0 / net.cap[p, x]
        P[x, done] = 1.0 / net.cap[x, p] + P[p, done]
    return P


def reroot(parent: np.ndarray, root: int) -> np.ndarray:
    """The same undirected tree rooted at ``root``. O(n)."""
    new = parent.copy()
    prev, node = -1, root
    while node >= 0:
        nxt = int(parent[node])
        new[node] = prev
        prev, node = node, nxt
    return new


def best_root_parent(net: Net, parent: np.ndarray) -> np.ndarray:
    """The same edges rooted where the fill (slowest path up + slowest path down) is least;
    ties to the lowest index. O(n^2)."""
    P = path_costs(net, parent)
    fill = P.max(axis=0) + P.max(axis=1)   # into r from the farthest DC + out of r
    root = int(np.flatnonzero(fill <= fill.min() * (1 + 1e-12))[0])
    return reroot(parent, root)


def best_root(tree: Tree, topology_or_graph) -> Tree:
    """``tree``'s edges rooted at the DC minimising its pipeline fill: the slowest
    (Σ 1/c) path from a DC up to the root plus the slowest path from the root down to a DC.
    Link loads do not depend on the root, so this is the root the time model prefers.
    Ties: the lowest-index DC. O(n^2) (every root at once, from all tree path sums)."""
    net = as_net(topology_or_graph)
    return to_tree(net, best_root_parent(net, parent_array(net, tree)))
