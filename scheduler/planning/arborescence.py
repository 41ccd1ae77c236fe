"""Minimum-cost arborescences (Chu-Liu/Edmonds), dense: the pricing step of split trees.

An out-arborescence from r reaches every DC from r along directed edges (a broadcast
tree); an in-arborescence into r is one of the reversed graph (an aggregation tree).
:func:`min_out_arborescence` is Edmonds' algorithm (1967) on a dense cost matrix: every DC
but the root takes its cheapest incoming edge; if that closes cycles, each cycle is
contracted into one node (an edge entering the cycle at v costs its cost minus v's chosen
edge), the smaller problem is solved, and each cycle is opened where the chosen edge enters
it. At most n - 1 contraction levels of O(n^2) numpy work each: O(n^3) worst case, a few
levels in practice.
"""
from __future__ import annotations

import numpy as np

__all__ = ["INF", "min_in_arborescence", "min_out_arborescence", "tree_cost"]

INF = np.inf


def _cycles(pred: np.ndarray) -> list:
    """The cycles of the functional graph v -> pred[v] (-1: none). O(n)."""
    n = len(pred)
    state = np.zeros(n, dtype=np.int64)           # 0 new, 1 on the current walk, 2 done
    cycles = []
    for start in range(n):
        walk, v = [], start
        while v >= 0 and state[v] == 0:
            state[v] = 1
            walk.append(v)
            v = int(pred[v])
        if v >= 0 and state[v] == 1:
            cycles.append(walk[walk.index(v):])
        for u in walk:
            state[u] = 2
    return cycles


def _first_min(block: np.ndarray, starts: np.ndarray, axis: int):
    """Per group of consecutive positions along ``axis`` (groups start at ``starts``): the
    minimum and the position of its first occurrence. O(block)."""
    low = np.minimum.reduceat(block, starts, axis=axis)
    sizes = np.diff(np.append(starts, block.shape[axis]))
    at = np.repeat(low, sizes, axis=axis) == block
    shape = [1, 1]
    shape[axis] = block.shape[axis]
    pos = np.where(at, np.arange(block.shape[axis]).reshape(shape), block.shape[axis])
    return low, np.minimum.reduceat(pos, starts, axis=axis)


def _contract(reduced: np.ndarray, group: np.ndarray, m: int):
    """(m x m cheapest edge between groups, the original (u, v) behind each). O(n^2)."""
    perm = np.argsort(group, kind="stable")
    starts = np.searchsorted(group[perm], np.arange(m))
    block = reduced[perm][:, perm]
    to_group, col = _first_min(block, starts, axis=1)           # n x m
    small, row = _first_min(to_group, starts, axis=0)           # m x m
    col_of = np.take_along_axis(col, row, axis=0)
    via = np.stack([perm[row], perm[np.minimum(col_of, len(perm) - 1)]], axis=-1)
    return small, via


def min_out_arborescence(cost: np.ndarray, root: int) -> np.ndarray:
    """The out-arborescence from ``root`` of least total cost; ``cost[u, v]`` is the cost of
    edge u -> v (inf: no edge). Returns a parent array (``parent[v] = u`` for its edge
    u -> v; -1 at the root). Raises ValueError if some DC cannot be reached from the root.
    O(n^3) worst case (see the module docstring)."""
    cost = np.array(cost, dtype=float)
    n = cost.shape[0]
    np.fill_diagonal(cost, INF)
    cost[:, root] = INF
    pred = np.argmin(cost, axis=0)
    best = cost[pred, np.arange(n)]
    pred[root] = -1
    unreachable = [v for v in range(n) if v != root and not np.isfinite(best[v])]
    if unreachable:
        raise ValueError(f"DCs {unreachable} cannot be reached from DC {root}")
    cycles = _cycles(pred)
    if not cycles:
        return pred
    group = np.full(n, -1, dtype=np.int64)
    for c, members in enumerate(cycles):
        group[members] = c
    rest = np.flatnonzero(group < 0)
    group[rest] = len(cycles) + np.arange(rest.size)
    m = len(cycles) + rest.size
    in_cycle = group < len(cycles)
    reduced = cost - np.where(in_cycle, best, 0.0)[None, :]     # entering v replaces pred[v]
    reduced[group[:, None] == group[None, :]] = INF
    small, via = _contract(reduced, group, m)
    inner = min_out_arborescence(small, int(group[root]))
    parent = np.where(in_cycle, pred, -1)
    for b in range(m):
        a = int(inner[b])
        if a >= 0:
            u, v = via[a, b]
            parent[v] = u                                       # opens b's cycle at v
    parent[root] = -1
    return parent


def min_in_arborescence(cost: np.ndarray, root: int) -> np.ndarray:
    """The in-arborescence into ``root`` of least total cost (``cost[u, v]``: edge u -> v):
    a parent array with ``parent[v]`` the DC v sends to. The out-arborescence of the
    reversed graph. O(n^3) worst case."""
    return min_out_arborescence(np.asarray(cost).T, root)


def tree_cost(cost: np.ndarray, parent: np.ndarray, inward: bool) -> float:
    """Σ of the costs of a parent array's edges: v -> parent[v] if ``inward`` else
    parent[v] -> v. O(n)."""
    child = np.flatnonzero(parent >= 0)
    if inward:
        return float(cost[child, parent[child]].sum())
    return float(cost[parent[child], child].sum())
