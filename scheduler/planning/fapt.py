"""FAPT: Fastest Aggregation Path Trees, the reference multi-root construction.

Each DC's FAPT tree joins every other DC to it over its widest path (greatest bottleneck
rate, a link's rate being the slower of its two directions since the tree uses both).
:func:`fapt_policy` uses one FAPT tree per root as candidates and lets the share LP pick the
root set and shares. With distinct rates every root's widest-path tree lies on the same
maximum-bottleneck spanning tree, so FAPT alone rarely beats the best single tree.
n = DCs, m = usable links.
"""
from __future__ import annotations

import heapq
import math

import numpy as np

from netstorm.geoserver.policy.tree import Tree

from .network import Net, as_net, dc_index, edge_key, inverse, parent_array, to_tree, tree_cap
from .shares import capped_shares
from .time_model import DEFAULT_CHUNK_BYTES, NOMINAL_MODEL_BYTES, predict

__all__ = ["fapt_all", "fapt_candidates", "fapt_policy", "fapt_score", "fapt_tree"]


def _fapt_heap(net: Net, root: int, width: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Widest-path tree into ``root``, binary-heap Dijkstra: O(m log n)."""
    n = len(net.dcs)
    neighbours = [np.flatnonzero(width[i] > 0).tolist() for i in range(n)]
    parent = np.full(n, -1, dtype=np.int64)
    best = {root: (-math.inf, 0, 0.0)}
    done = [False] * n
    heap = [(-math.inf, 0, 0.0, root, -1)]
    while heap:
        neg_w, hops, dist, node, via = heapq.heappop(heap)
        if done[node]:
            continue
        done[node] = True
        parent[node] = via
        for nxt in neighbours[node]:
            if done[nxt]:
                continue
            key = (max(neg_w, -float(width[node, nxt])), hops + 1, dist + float(lat[node, nxt]))
            if nxt not in best or key < best[nxt]:
                best[nxt] = key
                heapq.heappush(heap, (*key, nxt, node))
    return parent


def _fapt_dense(net: Net, roots, width: np.ndarray, lat: np.ndarray) -> list:
    """The same trees for several roots at once, array Dijkstra (no heap), one row per
    root: O(n^2) per root, vectorised over roots; better for dense meshes."""
    n = len(net.dcs)
    roots = np.asarray(list(roots), dtype=np.int64)
    ar = np.arange(roots.size)
    W = np.full((roots.size, n), -math.inf)
    H = np.full((roots.size, n), math.inf)
    L = np.full((roots.size, n), math.inf)
    parent = np.full((roots.size, n), -1, dtype=np.int64)
    done = np.zeros((roots.size, n), dtype=bool)
    W[ar, roots], H[ar, roots], L[ar, roots] = math.inf, 0.0, 0.0
    for _ in range(n):
        cand = ~done & (W > -math.inf)
        c1 = cand & (W == np.where(cand, W, -math.inf).max(axis=1, keepdims=True))
        c2 = c1 & (H == np.where(c1, H, math.inf).min(axis=1, keepdims=True))
        c3 = c2 & (L == np.where(c2, L, math.inf).min(axis=1, keepdims=True))
        v = np.argmax(c3, axis=1)                           # first (lowest-index) DC
        done[ar, v] = True
        nb = ~done & (width[v] > 0)
        nw = np.minimum(W[ar, v][:, None], width[v])
        nl = L[ar, v][:, None] + lat[v]
        nh = (H[ar, v] + 1)[:, None]
        better = nb & ((nw > W) | ((nw == W) & ((nh < H) | ((nh == H) & (nl < L)))))
        W = np.where(better, nw, W)
        H = np.where(better, nh, H)
        L = np.where(better, nl, L)
        parent = np.where(better, v[:, None], parent)
    return list(parent)


def fapt_all(net: Net, roots=None, dense: bool = None) -> list:
    """FAPT parent arrays for ``roots`` (default every DC): heap Dijkstra per root, or the
    array version when the mesh is dense (``dense`` forces one). O(roots·min(m log n,
    n^2))."""
    n = len(net.dcs)
    roots = list(range(n)) if roots is None else list(roots)
    width = np.minimum(net.cap, net.cap.T)
    inv = inverse(net.cap)
    lat = inv + inv.T
    if dense is None:
        dense = len(net.edges) * max(1.0, math.log2(n)) > n * n / 2
    if dense:
        return _fapt_dense(net, roots, width, lat)
    return [_fapt_heap(net, r, width, lat) for r in roots]


def fapt_tree(graph, root: str) -> Tree:
    """The Fastest Aggregation Path Tree rooted at ``root``: every DC reaches the root over
    its widest path (greatest bottleneck rate, a link's rate being the slower of its two
    directions since the tree uses both). A modified Dijkstra that keeps, per DC, the best
    (bottleneck, hops, Σ 1/c) label: O(m log n) with a heap, or O(n^2) with arrays, used
    when that is smaller (dense meshes). Among equally wide paths fewer hops win, then less
    Σ 1/c, then the lower-index DC (Dijkstra with such a secondary key is exact for the
    width and greedy for the tie-breaks)."""
    net = as_net(graph)
    return to_tree(net, fapt_all(net, [dc_index(net, root)])[0])


def fapt_score(tree_or_root, graph) -> float:
    """FAPT's reference score of a root, in Mbit/s (higher is better).

    For a root name, its :func:`fapt_tree` is scored; a :class:`Tree` is scored as given.
    Level ℓ >= 1 holds the DCs at depth ℓ; its speed is the slowest link (slower direction)
    from a DC at depth ℓ to its parent; score = 1 / Σ_ℓ 1/speed_ℓ. O(m log n) for a root,
    O(n·depth) for a tree.
    """
    net = as_net(graph)
    if isinstance(tree_or_root, Tree):
        parent = parent_array(net, tree_or_root)
    else:
        parent = fapt_all(net, [dc_index(net, tree_or_root)])[0]
    depth = np.full(len(parent), -1)
    depth[parent < 0] = 0
    while (depth < 0).any():
        todo = np.flatnonzero(depth < 0)
        ready = todo[depth[parent[todo]] >= 0]
        depth[ready] = depth[parent[ready]] + 1
    slowest = {}
    for v in np.flatnonzero(parent >= 0):
        p = int(parent[v])
        rate = min(net.cap[v, p], net.cap[p, v])
        slowest[depth[v]] = min(slowest.get(depth[v], math.inf), rate)
    return 1.0 / sum(1.0 / r for r in slowest.values())


def fapt_candidates(net: Net, model_bytes: float, chunk_bytes: float, fapt=None) -> list:
    """One FAPT tree per root, trees with the same edges merged (kept at the root whose
    predicted single-tree time is least; ties: the lower index). ``fapt``: the trees of
    :func:`fapt_all` if already built. O(n^2 log n) besides building them."""
    by_edges = {}
    for parent in (fapt_all(net) if fapt is None else fapt):
        key = edge_key(parent)
        t = predict(net, [parent], [1.0], model_bytes, chunk_bytes)[0]
        if key not in by_edges or t < by_edges[key][1]:
            by_edges[key] = (parent, t)
    return [p for p, _ in by_edges.values()]


def fapt_policy(graph, model_bytes: float = NOMINAL_MODEL_BYTES,
                chunk_bytes: float = DEFAULT_CHUNK_BYTES, max_trees: int = None) -> list:
    """FAPT with LP shares: ``[(Tree, share)]``, heaviest first.

    The candidates are :func:`fapt_tree` for every root (trees with the same edges are one
    candidate, rooted where the predicted time is least); the LP (:func:`optimal_shares`)
    then picks the root set and each root's share to minimise the busiest link, not a fixed
    formula such as share ∝ :func:`fapt_score`. At most ``max_trees`` (default n) kept.
    ``model_bytes`` and ``chunk_bytes`` only break ties between roots of the same edges.
    O(n·m log n + n^3 + LP).
    """
    net = as_net(graph)
    parents, shares = capped_shares(net, fapt_candidates(net, model_bytes, chunk_bytes),
                                    tree_cap(net, max_trees))
    order = sorted(range(len(parents)), key=lambda i: -shares[i])
    return [(to_tree(net, parents[i]), shares[i]) for i in order]
