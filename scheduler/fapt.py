"""Multi-root aggregation-tree policies: tree packing, FAPT trees, a time model (pure functions).

A policy is a set of spanning trees T_1..T_k over the DCs; tree t carries a share s_t of the
model (sum 1). Tree edges must be declared links usable both ways: aggregation runs
child -> parent, the broadcast parent -> child (``geoserver.aggregation``).

Time model
----------
For a model of B bytes, tree t puts s_t·B bytes on each of its edges once up (child ->
parent) and once down (parent -> child). Chunks stream, so one iteration is predicted as ::

    T = max over directed links e of 8·B·Σ_{t uses e} s_t / (1e6·c_e)      (busiest link)
      + max over trees t (s_t > 0) of fill_t                                 (pipeline fill)

    fill_t = 8·chunk_t/1e6 · ( max_v Σ_{hops h on v -> root} 1/c_h
                             + max_v Σ_{hops h on root -> v} 1/c_h ),   chunk_t = min(chunk, s_t·B)

``fill_t`` is the time one chunk needs to climb tree t's slowest leaf-to-root path and come
back down its slowest root-to-leaf path, store-and-forward: the part of an iteration during
which the bottleneck link cannot be busy yet. It is at most depth × (chunk time on the
slowest hop). It is not small: 1 MiB at 10-100 Mbit/s is 0.08-0.8 s per hop, so deep trees
pay seconds (it dominates at 64 DCs); and a tree whose share is a single chunk does not
pipeline at all, where adding the two terms over-counts. Propagation delay is not modelled
(topologies carry no latency). The first term is never below
:func:`scheduler.topology.cut_lower_bound`: every spanning tree crosses every cut, so all B
bytes cross it in each direction. Because each tree edge carries the same bytes up and
down, a tree edge is only as good as its slower direction: on very asymmetric links no tree
policy gets near the cut bound (separate reduce and broadcast trees would be needed).

Choosing shares for fixed trees is the linear program ``min z s.t. Σ_t s_t·a_te/c_e <= z
for every directed link e, Σ_t s_t = 1, s >= 0`` (a_te = 1 if tree t uses e), solved exactly
(:func:`optimal_shares`) by a dense simplex written here: the equivalent ``max Σp s.t. A p <=
1`` with rows and columns generated lazily (:class:`_GameLP`); :func:`solve_lp` is a general
dense two-phase simplex, the cross-check and fallback. Choosing the trees too is fractional
spanning-tree packing (:func:`pack_trees`, Garg-Könemann, then exact LP and column
generation). Link loads do not depend on a tree's root, only the fill does, so every tree's
root is picked afterwards to minimise its fill (:func:`best_root`). :func:`fapt_tree` and
:func:`fapt_score` are the reference Fastest-Aggregation-Path-Tree construction;
:func:`fapt_policy` uses one FAPT tree per root as candidates and lets the LP pick the root
set and shares. :func:`shallow_tree` gives the least-depth tree per root (a star on a full
mesh). :func:`compute_policy` returns the best, under the same model, of: the best single
tree (star), FAPT, packing, shallow trees with LP shares, and packing + shallow trees in one
LP.

Every function takes a :class:`~scheduler.topology.Topology` or a ``networkx.DiGraph`` whose
edges carry ``mbps`` (as :meth:`Topology.graph` builds); DC order (for ties) is the
topology's ``dcs`` or the graph's node order. n = DCs, m = undirected usable links.
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from netstorm.geoserver.tree import Policy, PolicyError, Tree

from .lp import LPError, solve_lp
from .topology import Link, Topology

DEFAULT_CHUNK_BYTES = 1 << 20
RESNET18_BYTES = 46758048          # float32 resnet18 parameters, the benchmark's model
MAX_POLICY_TREES = 255             # geoserver.tree.Policy's limit (one byte on the wire)
MAX_MIXED_COLUMNS = 64             # compute_policy's "mixed" LP only up to this many trees
HEAVIEST_START_MAX_DCS = 16        # pack_trees solves the GK-heaviest start up to this size
_SHARE_FLOOR = 1e-12               # LP shares below this are zeroed (then renormalised)


# --- the network as arrays -------------------------------------------------------------------

@dataclass(frozen=True)
class _Net:
    dcs: tuple                 # names, in tie-breaking order
    index: dict                # name -> position
    cap: np.ndarray            # n x n Mbit/s of usable directions (both ways exist), else 0
    edges: tuple               # usable undirected links (i, j), i < j
    graph: nx.DiGraph          # every declared direction, for link_loads' keys


def _net(topology_or_graph) -> _Net:
    """Arrays of a topology or graph; a link is usable iff both directions exist with rate
    > 0. Raises ValueError if the usable links do not connect the DCs. O(n^2 + m)."""
    if isinstance(topology_or_graph, _Net):
        return topology_or_graph
    if isinstance(topology_or_graph, Topology):
        graph = topology_or_graph.graph()
        dcs = tuple(topology_or_graph.dcs)
    elif isinstance(topology_or_graph, nx.DiGraph):
        graph = topology_or_graph
        dcs = tuple(graph.nodes)
    else:
        raise TypeError(f"expected a Topology or networkx.DiGraph, got "
                        f"{type(topology_or_graph).__name__}")
    if len(dcs) < 2:
        raise ValueError(f"a policy needs at least 2 DCs, got {list(dcs)}")
    index = {dc: i for i, dc in enumerate(dcs)}
    n = len(dcs)
    cap = np.zeros((n, n))
    for a, b, data in graph.edges(data=True):
        mbps = data.get("mbps", 0.0)
        if a != b and mbps is not None and mbps > 0 and math.isfinite(mbps):
            cap[index[a], index[b]] = float(mbps)
    both = (cap > 0) & (cap.T > 0)
    cap = np.where(both, cap, 0.0)
    edges = tuple((int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(both, 1))))
    und = nx.Graph()
    und.add_nodes_from(range(n))
    und.add_edges_from(edges)
    if not nx.is_connected(und):
        parts = sorted(sorted(dcs[i] for i in c) for c in nx.connected_components(und))
        raise ValueError(f"the links usable both ways do not connect the DCs: {parts}")
    return _Net(dcs, index, cap, edges, graph)


def _parents(net: _Net, tree: Tree) -> np.ndarray:
    """A Tree as a parent array (-1 at the root); checks it spans the DCs over usable links.
    O(n)."""
    try:
        tree.validate(net.dcs)
    except PolicyError as exc:
        raise ValueError(str(exc)) from exc
    parent = np.full(len(net.dcs), -1, dtype=np.int64)
    for dc, up in tree.parent.items():
        if up is not None:
            i, j = net.index[dc], net.index[up]
            if net.cap[i, j] <= 0:
                raise ValueError(f"tree rooted at {tree.root!r} uses {dc}-{up}, which is not "
                                 f"a link usable both ways")
            parent[i] = j
    return parent


def _tree(net: _Net, parent: np.ndarray) -> Tree:
    return Tree(root=net.dcs[int(np.flatnonzero(parent < 0)[0])],
                parent={net.dcs[i]: (None if p < 0 else net.dcs[int(p)])
                        for i, p in enumerate(parent)})


def _edge_key(parent: np.ndarray) -> tuple:
    """The tree's undirected edge set, independent of its root. O(n log n)."""
    return tuple(sorted((min(i, int(p)), max(i, int(p))) for i, p in enumerate(parent) if p >= 0))


def _pairs(trees_with_shares) -> list:
    """``[(Tree, share)]`` from such pairs, a Policy or a PolicyPlan."""
    if isinstance(trees_with_shares, PolicyPlan):
        return list(zip(trees_with_shares.policy.trees, trees_with_shares.shares))
    if isinstance(trees_with_shares, Policy):
        return list(zip(trees_with_shares.trees, trees_with_shares.shares))
    pairs = [(tree, float(share)) for tree, share in trees_with_shares]
    if not pairs:
        raise ValueError("no trees")
    if any(not (s >= 0) for _, s in pairs) or abs(sum(s for _, s in pairs) - 1.0) > 1e-6:
        raise ValueError(f"shares {[s for _, s in pairs]} must be >= 0 and sum to 1")
    return pairs


# --- the time model --------------------------------------------------------------------------

def _load_matrix(net: _Net, parents, shares) -> np.ndarray:
    """n x n: Σ of the shares of the trees using each direction. O(k·n)."""
    n = len(net.dcs)
    load = np.zeros((n, n))
    for parent, share in zip(parents, shares):
        child = np.flatnonzero(parent >= 0)
        up = parent[child]
        np.add.at(load, (child, up), share)
        np.add.at(load, (up, child), share)
    return load


def _fill_hops(net: _Net, parent: np.ndarray) -> float:
    """Σ 1/c (s/Mbit) of the slowest leaf -> root path plus the slowest root -> leaf path.
    O(n)."""
    n = len(parent)
    children = [[] for _ in range(n)]
    root = -1
    for i, p in enumerate(parent):
        if p < 0:
            root = i
        else:
            children[int(p)].append(i)
    up = np.zeros(n)
    down = np.zeros(n)
    stack = [root]
    while stack:
        node = stack.pop()
        for child in children[node]:
            up[child] = up[node] + 1.0 / net.cap[child, node]
            down[child] = down[node] + 1.0 / net.cap[node, child]
            stack.append(child)
    return float(up.max() + down.max())


def _predict(net: _Net, parents, shares, model_bytes: float, chunk_bytes: float):
    """(predicted seconds, busy seconds per direction as n x n). O(k·n)."""
    if not model_bytes > 0 or not chunk_bytes > 0:
        raise ValueError(f"model_bytes and chunk_bytes must be > 0, got {model_bytes!r}, "
                         f"{chunk_bytes!r}")
    load = _load_matrix(net, parents, shares)
    busy = np.zeros_like(load)
    used = load > 0
    busy[used] = 8.0 * model_bytes * load[used] / (1e6 * net.cap[used])
    fill = max((8.0 * min(chunk_bytes, s * model_bytes) / 1e6 * _fill_hops(net, p)
                for p, s in zip(parents, shares) if s > 0), default=0.0)
    return float(busy.max()) + fill, busy


def link_loads(trees_with_shares, topology_or_graph, model_bytes: float) -> dict:
    """Busy time per direction: ``{(u, v): seconds}`` = 8·B·Σ_{t uses u->v} s_t / (1e6·c).

    Every declared direction is a key (0.0 when unused), so the result can be set beside
    measured per-link times. ``trees_with_shares``: ``[(Tree, share)]``, a Policy or a
    PolicyPlan. Raises ValueError for a tree that does not span the DCs over usable links.
    O(k·n + n^2 + declared directions).
    """
    net = _net(topology_or_graph)
    pairs = _pairs(trees_with_shares)
    parents = [_parents(net, t) for t, _ in pairs]
    _, busy = _predict(net, parents, [s for _, s in pairs], model_bytes, DEFAULT_CHUNK_BYTES)
    return {(a, b): float(busy[net.index[a], net.index[b]]) for a, b in net.graph.edges()}


def pipeline_fill_s(trees_with_shares, topology_or_graph, model_bytes: float,
                    chunk_bytes: float = DEFAULT_CHUNK_BYTES) -> float:
    """The pipeline-fill term of the time model alone (see the module docstring). O(k·n)."""
    net = _net(topology_or_graph)
    pairs = _pairs(trees_with_shares)
    return max((8.0 * min(chunk_bytes, s * model_bytes) / 1e6 * _fill_hops(net, _parents(net, t))
                for t, s in pairs if s > 0), default=0.0)


def predict_iteration_s(trees_with_shares, topology_or_graph, model_bytes: float,
                        chunk_bytes: float = DEFAULT_CHUNK_BYTES) -> float:
    """Predicted seconds of one all-reduce of ``model_bytes``: busiest link + pipeline fill.

    ``trees_with_shares``: ``[(Tree, share)]`` (shares >= 0, sum 1), a Policy or a
    PolicyPlan. O(k·n + n^2) for k trees.
    """
    net = _net(topology_or_graph)
    pairs = _pairs(trees_with_shares)
    parents = [_parents(net, t) for t, _ in pairs]
    return _predict(net, parents, [s for _, s in pairs], model_bytes, chunk_bytes)[0]


# --- optimal shares for fixed trees ----------------------------------------------------------

def _directions(net: _Net) -> np.ndarray:
    """Flat indices (i·n + j) of the usable directions: the rows of the share LP."""
    return np.flatnonzero(net.cap.reshape(-1) > 0)


def _column(net: _Net, parent: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """One tree's LP column over ``rows``: c_min/c_d on the directions it uses, else 0."""
    n = len(parent)
    child = np.flatnonzero(parent >= 0)
    up = parent[child]
    used = np.concatenate([child * n + up, up * n + child])
    col = np.zeros(rows.size)
    pos = np.searchsorted(rows, used)
    flat = net.cap.reshape(-1)
    col[pos] = flat[rows].min() / flat[used]
    return col


class _GameLP:
    """``max Σ_j p_j s.t. U p <= 1, p >= 0`` for U >= 0 (rows: directions, columns: trees).

    With s = p/Σp and z = 1/Σp this is ``min z s.t. U s <= z, Σ s = 1``: the share LP. The
    origin is feasible, so no phase 1 is needed. One dense tableau is kept and edited:

    * rows join lazily (constraint generation: each column's largest entry and the busiest
      rows under equal shares first, then rows the optimum violates; a new row keeps the
      basis dual feasible, so the dual simplex continues), and rows far from binding (slack
      > 1/2) leave after each solve, which keeps the tableau a small multiple of k tall;
    * columns join (column generation; the primal simplex continues) and leave (a leaving
      column's cost is raised so the primal simplex drives it to zero, then it is deleted).

    Dantzig's rule, Bland's after 50 degenerate pivots in a row, so neither simplex cycles.
    A pivot costs O(r·(k + r)) for r rows and k columns in the tableau.
    """

    def __init__(self, n_rows: int, tol: float = 1e-9):
        self.n_rows = n_rows
        self.tol = tol
        self.T = np.zeros((0, 1))           # tableau; last column: right-hand side
        self.obj = np.zeros(1)              # reduced costs; last entry: -objective
        self.basis = np.zeros(0, dtype=np.int64)
        self.colvar = []                    # tableau column -> ("p", tree id) | ("s", U row)
        self.cols = {}                      # tree id -> its U column (every row)
        self.active = set()                 # U rows in the tableau
        self.pivots = 0
        self._next = 0
        self._U = None

    @classmethod
    def build(cls, U: np.ndarray, tol: float = 1e-9) -> "_GameLP":
        """An LP over U's columns (tree ids 0..k-1), not yet solved."""
        lp = cls(U.shape[0], tol)
        start = set(int(r) for r in np.argmax(U, axis=0))
        start |= set(int(r) for r in np.argsort(-U.sum(axis=1), kind="stable")[:U.shape[1]])
        lp.add_rows(sorted(r for r in start if U[r].any()))
        for j in range(U.shape[1]):
            lp.add_column(U[:, j])
        return lp

    # --- bookkeeping
    def ids(self) -> list:
        return list(self.cols)

    def U(self) -> np.ndarray:
        if self._U is None:
            self._U = np.column_stack([self.cols[i] for i in self.cols])
        return self._U

    def p(self) -> np.ndarray:
        """Values of the columns, in :meth:`ids` order."""
        pos = {tid: k for k, tid in enumerate(self.cols)}
        p = np.zeros(len(pos))
        for i, b in enumerate(self.basis):
            kind, ident = self.colvar[b]
            if kind == "p":
                p[pos[ident]] = max(self.T[i, -1], 0.0)
        return p

    def duals(self) -> np.ndarray:
        """Row duals u >= 0 (zero off the tableau): U^T u >= 1 on every column, Σu = Σp."""
        u = np.zeros(self.n_rows)
        for c, (kind, ident) in enumerate(self.colvar):
            if kind == "s":
                u[ident] = max(self.obj[c], 0.0)
        return u

    def _slacks(self):
        idx = [c for c, (kind, _) in enumerate(self.colvar) if kind == "s"]
        return np.array(idx, dtype=np.int64), np.array([self.colvar[c][1] for c in idx],
                                                       dtype=np.int64)

    def _widen(self, m: int) -> int:
        first = self.T.shape[1] - 1
        self.T = np.hstack([self.T[:, :-1], np.zeros((self.T.shape[0], m)), self.T[:, -1:]])
        self.obj = np.concatenate([self.obj[:-1], np.zeros(m), self.obj[-1:]])
        return first

    def _delete_columns(self, cols) -> None:
        cols = sorted(set(int(c) for c in cols))
        self.T = np.delete(self.T, cols, axis=1)
        self.obj = np.delete(self.obj, cols)
        for c in reversed(cols):
            self.colvar.pop(c)
        self.basis = self.basis - np.searchsorted(np.array(cols), self.basis, side="right")

    def _pivot(self, r: int, j: int) -> None:
        T = self.T
        T[r] /= T[r, j]
        col = T[:, j].copy()
        col[r] = 0.0
        T -= np.outer(col, T[r])
        self.obj -= self.obj[j] * T[r]
        self.basis[r] = j
        self.pivots += 1
        if self.pivots > 200_000:
            raise LPError("share LP: too many pivots")

    # --- edits
    def add_rows(self, rows) -> None:
        """Bring U rows into the tableau (:meth:`solve` runs the dual simplex)."""
        rows = [int(r) for r in rows if int(r) not in self.active]
        if not rows:
            return
        m = len(rows)
        first = self._widen(m)
        new = np.zeros((m, self.T.shape[1]))
        for c, (kind, ident) in enumerate(self.colvar):
            if kind == "p":
                new[:, c] = self.cols[ident][rows]
        new[np.arange(m), first + np.arange(m)] = 1.0
        new[:, -1] = 1.0
        basic = [i for i, b in enumerate(self.basis) if self.colvar[b][0] == "p"]
        if basic:
            new -= new[:, self.basis[basic]] @ self.T[basic]
        self.T = np.vstack([self.T, new])
        self.basis = np.concatenate([self.basis, first + np.arange(m)])
        self.colvar += [("s", r) for r in rows]
        self.active.update(rows)

    def add_column(self, u: np.ndarray) -> int:
        """A new tree column with entries ``u`` on every row; returns its id (:meth:`solve`
        runs the primal simplex)."""
        u = np.asarray(u, dtype=float)
        if not u.any():
            raise ValueError("a tree column without any link")
        if not any(u[r] > 0 for r in self.active):
            self.add_rows([int(np.argmax(u))])
        tid = self._next
        self._next += 1
        s_idx, s_rows = self._slacks()
        a = u[s_rows]
        c = self._widen(1)
        self.T[:, c] = self.T[:, s_idx] @ a
        self.obj[c] = -1.0 + self.obj[s_idx] @ a
        self.colvar.append(("p", tid))
        self.cols[tid] = u
        self._U = None
        return tid

    def remove_column(self, tid: int) -> None:
        """Delete a tree column (:meth:`solve` re-optimises)."""
        c = self.colvar.index(("p", tid))
        rows = np.flatnonzero(self.basis == c)
        if rows.size:                       # basic: cost -1 -> +1 drives it to zero
            r = int(rows[0])
            self.obj -= 2.0 * self.T[r]
            self.obj[c] += 2.0
            self._primal()
            rows = np.flatnonzero(self.basis == c)
            if rows.size:                   # basic at zero: one degenerate pivot out
                r = int(rows[0])
                row = np.abs(self.T[r, :-1])
                row[c] = 0.0
                j = int(np.argmax(row))
                if row[j] <= self.tol:
                    raise LPError("share LP: cannot pivot a column out")
                self._pivot(r, j)
        self._delete_columns([c])
        del self.cols[tid]
        self._U = None
        self._primal()

    def purge(self, slack: float = 0.5) -> None:
        """Drop rows whose slack is basic and above ``slack`` (far from binding): the
        tableau minus that row and that slack's column is the tableau without the row."""
        drop = [i for i, b in enumerate(self.basis)
                if self.colvar[b][0] == "s" and self.T[i, -1] > slack]
        if not drop:
            return
        cols = self.basis[drop]
        self.active -= {self.colvar[c][1] for c in cols}
        keep = np.ones(len(self.basis), dtype=bool)
        keep[drop] = False
        self.T = self.T[keep]
        self.basis = self.basis[keep]
        self._delete_columns(cols)

    # --- simplex
    def _primal(self) -> None:
        tol, degenerate, bland = self.tol, 0, False
        while True:
            d = self.obj[:-1]
            if bland:
                cand = np.flatnonzero(d < -tol)
                if not cand.size:
                    return
                j = int(cand[0])
            else:
                j = int(np.argmin(d))
                if d[j] >= -tol:
                    return
            col = self.T[:, j]
            pos = np.flatnonzero(col > tol)
            if not pos.size:
                raise LPError("share LP unbounded (a tree without active rows)")
            ratios = self.T[pos, -1] / col[pos]
            best = ratios.min()
            ties = pos[ratios <= best + tol]
            r = int(ties[np.argmin(self.basis[ties])]) if bland else int(ties[0])
            degenerate = degenerate + 1 if best <= tol else 0
            bland = bland or degenerate >= 50
            self._pivot(r, j)

    def _dual(self) -> None:
        tol, degenerate, bland = self.tol, 0, False
        while self.T.shape[0]:
            rhs = self.T[:, -1]
            if bland:
                cand = np.flatnonzero(rhs < -tol)
                if not cand.size:
                    return
                r = int(cand[np.argmin(self.basis[cand])])
            else:
                r = int(np.argmin(rhs))
                if rhs[r] >= -tol:
                    return
            row = self.T[r, :-1]
            cand = np.flatnonzero(row < -tol)
            if not cand.size:
                raise LPError("share LP infeasible (cannot happen: p = 0 is feasible)")
            ratios = np.maximum(self.obj[cand], 0.0) / -row[cand]
            best = ratios.min()
            j = int(cand[np.flatnonzero(ratios <= best + tol)[0]])
            degenerate = degenerate + 1 if best <= tol else 0
            bland = bland or degenerate >= 50
            self._pivot(r, j)

    def solve(self) -> None:
        """Optimise, adding violated rows until none is: then optimal over all rows."""
        self._dual()
        self._primal()
        batch = len(self.cols) // 2 + 8
        while True:
            viol = self.U() @ self.p() - 1.0
            order = np.argsort(-viol, kind="stable")[:batch + len(self.active)]
            new = [int(r) for r in order if viol[r] > self.tol and int(r) not in self.active]
            if not new:
                break
            self.add_rows(new[:batch])
            self._dual()
            self._primal()
        self.purge()

    def result(self):
        """(shares in :meth:`ids` order, z = max_d (U s)_d): tiny shares zeroed (then
        renormalised), z evaluated on every row."""
        p = self.p()
        shares = p / p.sum()
        shares[shares < _SHARE_FLOOR] = 0.0
        shares /= shares.sum()
        return shares, float((self.U() @ shares).max())


def _share_lp_reference(U: np.ndarray, tol: float = 1e-9):
    """The same LP, re-solved from scratch by :func:`solve_lp` in every constraint-generation
    round (slower; a cross-check and the fallback). Returns (shares, z)."""
    k = U.shape[1]
    active = set(int(i) for i in np.argmax(U, axis=0))
    active |= set(int(i) for i in np.argsort(-U.sum(axis=1), kind="stable")[:k])
    while True:
        idx = np.array(sorted(active))
        p = solve_lp(-np.ones(k), A_ub=U[idx], b_ub=np.ones(idx.size)).x
        viol = U @ p - 1.0
        new = [int(i) for i in np.argsort(-viol, kind="stable")[:2 * k + 16]
               if viol[i] > tol and int(i) not in active]
        if not new:
            break
        active |= set(new)
    shares = p / p.sum()
    shares[shares < _SHARE_FLOOR] = 0.0
    shares /= shares.sum()
    return shares, float((U @ shares).max())


def _solve_shares(net: _Net, parents: list, rows: np.ndarray = None):
    """Exact shares for ``parents``: (shares, z in 1/(Mbit/s), solved _GameLP or None).
    z·8·B/1e6 is the busiest link's seconds; the LP's tree ids are 0..k-1 in order."""
    rows = _directions(net) if rows is None else rows
    U = np.column_stack([_column(net, p, rows) for p in parents])
    unit = net.cap.reshape(-1)[rows].min()
    try:
        lp = _GameLP.build(U)
        lp.solve()
        shares, z = lp.result()
    except LPError:                       # numerical trouble: the from-scratch solver
        lp = None
        shares, z = _share_lp_reference(U)
    return shares, z / unit, lp


def optimal_shares(trees, topology_or_graph, model_bytes: float = 1.0):
    """Shares minimising the busiest link's time for the given trees, exactly.

    Returns ``(shares, seconds)``: shares aligned with ``trees`` (>= 0, sum 1) and the busiest
    link's busy time 8·B·z/1e6 for ``model_bytes`` B. The LP (module docstring) has k
    variables and one row per usable direction; it is solved as the equivalent game LP
    ``max Σp s.t. A p <= 1`` by :class:`_GameLP`: dense simplex with constraint generation,
    so only rows that bind or were violated on the way enter the tableau. Identical trees
    split one share arbitrarily. O(k·n^2) to build, then simplex pivots of O(r·(k + r)) for
    r active rows (r is typically 2-5·k).
    """
    net = _net(topology_or_graph)
    parents = [_parents(net, t) for t in trees]
    if not parents:
        raise ValueError("no trees")
    shares, z, _ = _solve_shares(net, parents)
    return [float(s) for s in shares], 8.0 * model_bytes * z / 1e6


# --- spanning trees and roots ----------------------------------------------------------------

def _mst(cost: np.ndarray) -> np.ndarray:
    """Prim on a dense symmetric cost matrix (inf: no edge); parent array rooted at DC 0,
    ties to the lowest index. O(n^2)."""
    n = cost.shape[0]
    parent = np.full(n, -1, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    done[0] = True
    best = cost[0].copy()
    link = np.zeros(n, dtype=np.int64)
    best[0] = np.inf
    for _ in range(n - 1):
        v = int(np.argmin(np.where(done, np.inf, best)))
        parent[v] = link[v]
        done[v] = True
        closer = cost[v] < best
        best[closer] = cost[v][closer]
        link[closer] = v
    return parent


def _path_costs(net: _Net, parent: np.ndarray) -> np.ndarray:
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


def _reroot(parent: np.ndarray, root: int) -> np.ndarray:
    """The same undirected tree rooted at ``root``. O(n)."""
    new = parent.copy()
    prev, node = -1, root
    while node >= 0:
        nxt = int(parent[node])
        new[node] = prev
        prev, node = node, nxt
    return new


def _best_root(net: _Net, parent: np.ndarray) -> np.ndarray:
    """The same edges rooted where the fill (slowest path up + slowest path down) is least;
    ties to the lowest index. O(n^2)."""
    P = _path_costs(net, parent)
    fill = P.max(axis=0) + P.max(axis=1)   # into r from the farthest DC + out of r
    root = int(np.flatnonzero(fill <= fill.min() * (1 + 1e-12))[0])
    return _reroot(parent, root)


def best_root(tree: Tree, topology_or_graph) -> Tree:
    """``tree``'s edges rooted at the DC minimising its pipeline fill: the slowest
    (Σ 1/c) path from a DC up to the root plus the slowest path from the root down to a DC.
    Link loads do not depend on the root, so this is the root the time model prefers.
    Ties: the lowest-index DC. O(n^2) (every root at once, from all tree path sums)."""
    net = _net(topology_or_graph)
    return _tree(net, _best_root(net, _parents(net, tree)))


# --- fractional spanning-tree packing (Garg-Könemann) ----------------------------------------

@dataclass
class Packing:
    """What :func:`pack_trees_detail` found: trees (at their best roots) and shares, the
    busiest-link factor z in 1/(Mbit/s) (seconds = 8·B·z/1e6), ``z_lower``: a lower bound on
    z over any number of trees (so z/z_lower bounds the distance from optimal), and work
    counters."""
    trees: list
    shares: list
    z: float
    z_lower: float
    start: str
    gk_iterations: int
    gk_trees: int
    polish_rounds: int


def _garg_konemann(net: _Net, epsilon: float, max_iterations: int, stop_early: bool = True):
    """Multiplicative-weights fractional spanning-tree packing (Garg & Könemann).

    Every direction d has length l_d = 1/c_d. Each iteration takes a minimum spanning tree
    under the undirected cost l(u->v) + l(v->u), routes f = its smallest capacity (both
    directions of every edge) on it, and multiplies the length of each direction it uses by
    (1 + ε·f/c_d). ``stop_early``: stop when the flow, scaled to shares, is within (1 + ε)
    of the dual bound (MST length / Σ c_d·l_d, a lower bound on the optimal z), or when
    Garg-Könemann's own rule D(l) >= 1/δ holds (δ = ((1+ε)m')^(-1/ε), m' directions).
    Returns (trees in order of discovery [(parent, flow)], z of all of them with shares
    ∝ flow, best lower bound, iterations). O(iterations·n^2).
    """
    n = len(net.dcs)
    usable = net.cap > 0
    length = np.where(usable, 1.0 / np.where(usable, net.cap, 1.0), np.inf)
    directions = int(usable.sum())
    log_stop = math.log((1 + epsilon) * directions) / epsilon - math.log(1 + epsilon)
    log_scale = 0.0                       # lengths are kept divided by exp(log_scale)
    flow = np.zeros((n, n))
    total = 0.0
    pool = {}
    z_lower = 0.0
    caps = net.cap[usable]
    iteration = 0
    for iteration in range(1, max_iterations + 1):
        parent = _mst(length + length.T)
        child = np.flatnonzero(parent >= 0)
        up = parent[child]
        tree_len = float(length[child, up].sum() + length[up, child].sum())
        dual = float((caps * length[usable]).sum())
        z_lower = max(z_lower, tree_len / dual)
        amount = float(min(net.cap[child, up].min(), net.cap[up, child].min()))
        key = parent.tobytes()
        if key in pool:
            pool[key][1] += amount
        else:
            pool[key] = [parent, amount]
        total += amount
        flow[child, up] += amount
        flow[up, child] += amount
        length[child, up] *= 1 + epsilon * amount / net.cap[child, up]
        length[up, child] *= 1 + epsilon * amount / net.cap[up, child]
        top = float(length[usable].max())
        if top > 1e100:
            length[usable] /= top
            log_scale += math.log(top)
        if stop_early:
            z = float((flow[usable] / caps).max()) / total
            if z <= (1 + epsilon) * z_lower or log_scale + math.log(dual) >= log_stop:
                break
    z = float((flow[usable] / caps).max()) / total
    return list(pool.values()), z, z_lower, iteration


def _price_tree(net: _Net, rows: np.ndarray, duals: np.ndarray):
    """The spanning tree with the least dual price Σ_d u_d·c_min/c_d: (parent, price). An
    MST, O(n^2)."""
    n = len(net.dcs)
    flat = net.cap.reshape(-1)
    price = np.zeros(n * n)
    price[rows] = duals * flat[rows].min() / flat[rows]
    price = price.reshape(n, n)
    cost = np.where(net.cap > 0, price + price.T, np.inf)
    parent = _mst(cost)
    child = np.flatnonzero(parent >= 0)
    return parent, float(cost[child, parent[child]].sum())


def _polish(net: _Net, parents: list, max_trees: int, rounds: int, solved=None):
    """Column generation with swaps. The LP's duals u price every spanning tree by one MST;
    a tree priced below 1 improves the LP, so it joins; while more than ``max_trees`` trees
    have a share the lightest leaves (the LP is edited and re-solved warm, not rebuilt).
    Stops when no tree prices below 1 (the shares are then optimal over ALL spanning trees),
    when a tree comes back, or after ``rounds``. Returns (parents, shares, z, lower bound on
    z over all trees, rounds done). O(rounds·(n^2 + LP edits))."""
    rows = _directions(net)
    unit = net.cap.reshape(-1)[rows].min()
    shares, z, lp = _solve_shares(net, parents, rows) if solved is None else solved
    tree_of = dict(enumerate(parents))
    best = (list(parents), shares, z)
    z_lower, tried, done = 0.0, {_edge_key(p) for p in parents}, 0
    try:
        for done in range(1, rounds + 1):
            if lp is None:
                break
            new, value = _price_tree(net, rows, lp.duals())
            z_lower = max(z_lower, value * z)
            if value >= 1 - 1e-9 or _edge_key(new) in tried:
                break
            tried.add(_edge_key(new))
            tree_of[lp.add_column(_column(net, new, rows))] = new
            lp.solve()
            shares, zu = lp.result()
            while int((shares > 0).sum()) > max_trees:
                ids = lp.ids()
                held = [i for i in range(len(ids)) if shares[i] > 0]
                lp.remove_column(ids[min(held, key=lambda i: shares[i])])
                lp.solve()
                shares, zu = lp.result()
            ids = lp.ids()
            if len(ids) > 2 * max_trees + 8:              # forget idle columns
                for i in range(len(ids)):
                    if shares[i] == 0:
                        lp.remove_column(ids[i])
                lp.solve()
                shares, zu = lp.result()
            z = zu / unit
            if z < best[2] * (1 - 1e-12):
                best = ([tree_of[i] for i in lp.ids()], shares, z)
    except LPError:
        pass                                  # keep the best found so far
    parents, shares, z = best
    if int((shares > 0).sum()) > max_trees:   # only if no polish round ran
        held = [i for i in np.argsort(-shares, kind="stable") if shares[i] > 0][:max_trees]
        parents = [parents[i] for i in held]
        shares, z, _ = _solve_shares(net, parents, rows)
    return parents, shares, z, z_lower, done


def _merge(net: _Net, parents, shares) -> list:
    """[(parent at its best root, share)] with identical edge sets merged, zero shares gone,
    heaviest first (ties: first found). O(k·n^2)."""
    merged = {}
    for parent, share in zip(parents, shares):
        if share > 0:
            key = _edge_key(parent)
            if key in merged:
                merged[key][1] += float(share)
            else:
                merged[key] = [parent, float(share)]
    items = sorted(merged.values(), key=lambda item: -item[1])
    total = sum(s for _, s in items)
    return [(_best_root(net, p), s / total) for p, s in items]


def pack_trees_detail(graph, epsilon: float = 0.05, max_trees: int = None,
                      max_iterations: int = None, polish_rounds: int = None) -> Packing:
    """:func:`pack_trees` with its diagnostics (see :class:`Packing`)."""
    net = _net(graph)
    n = len(net.dcs)
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
    max_trees = min(MAX_POLICY_TREES, n if max_trees is None else int(max_trees))
    if max_trees < 1:
        raise ValueError(f"max_trees must be >= 1, got {max_trees!r}")
    max_iterations = n + 20 if max_iterations is None else max(1, int(max_iterations))
    polish_rounds = min(n, 16) if polish_rounds is None else max(0, int(polish_rounds))
    pool, _, z_gk, iterations = _garg_konemann(net, epsilon, max_iterations)
    heaviest = [p for p, _ in sorted(pool, key=lambda item: -item[1])[:max_trees]]
    spread = [p for p, _ in _garg_konemann(net, 1.0, max_trees, stop_early=False)[0]]
    candidates = [("gk-spread", spread)]
    if n <= HEAVIEST_START_MAX_DCS:
        candidates.append(("gk-heaviest", heaviest))
    starts = {name: (parents, _solve_shares(net, parents)) for name, parents in candidates}
    start = min(starts, key=lambda name: starts[name][1][1])
    parents, shares, z, z_cg, rounds = _polish(net, starts[start][0], max_trees, polish_rounds,
                                               solved=starts[start][1])
    pairs = _merge(net, parents, shares)
    return Packing(trees=[_tree(net, p) for p, _ in pairs], shares=[s for _, s in pairs],
                   z=z, z_lower=max(z_gk, z_cg), start=start, gk_iterations=iterations,
                   gk_trees=len(pool), polish_rounds=rounds)


def pack_trees(graph, epsilon: float = 0.05, max_trees: int = None,
               max_iterations: int = None, polish_rounds: int = None) -> list:
    """Fractional spanning-tree packing: ``[(Tree, share)]`` minimising the busiest link.

    1. Garg-Könemann multiplicative weights (:func:`_garg_konemann`): per iteration one
       O(n^2) Prim MST under the lengths len(u->v) + len(v->u), flow = the tree's smallest
       capacity, lengths ×(1 + ε·flow/c). Garg & Könemann (FOCS 1998) bound the iterations
       to a (1+ε)^3-approximation by O(m'·log_{1+ε} m') (m' directions): polynomial.
       ``max_iterations`` (default n + 20) caps it in practice: its trees are only the
       candidates, the next steps make the shares exact and bound the distance to optimal.
    2. Prune to ``max_trees`` (default n, at most 255): the heaviest GK trees, and, as a
       second start, the first ``max_trees`` trees of a coarse run (ε = 1, whose trees
       avoid each other's links); the shares of each set are re-optimised exactly by the LP
       (:func:`optimal_shares`) and the better set kept. Under a tree cap the coarse start
       was never worse on 35 test graphs (often 1.5-2x better), so above
       :data:`HEAVIEST_START_MAX_DCS` DCs only it is solved.
    3. Column generation (``polish_rounds``, default min(n, 16)): the LP's dual prices turn
       the search for an improving tree into one more MST; it joins, the lightest tree
       leaves when the set is full, the LP is solved again (warm). When no tree improves,
       the shares are optimal over every spanning tree.
    4. Identical trees merged; each tree re-rooted where its pipeline fill is least.

    Returns trees with shares > 0 (sum 1, heaviest first), each a spanning tree over links
    usable both ways. O((max_iterations + max_trees + polish_rounds)·n^2 + (2 +
    polish_rounds)·LP), LP as in :func:`optimal_shares`.
    """
    packing = pack_trees_detail(graph, epsilon, max_trees, max_iterations, polish_rounds)
    return list(zip(packing.trees, packing.shares))


# --- FAPT: fastest aggregation path trees ----------------------------------------------------

def _fapt_heap(net: _Net, root: int, width: np.ndarray, lat: np.ndarray) -> np.ndarray:
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


def _fapt_dense(net: _Net, roots, width: np.ndarray, lat: np.ndarray) -> list:
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


def _fapt_all(net: _Net, roots=None, dense: bool = None) -> list:
    """FAPT parent arrays for ``roots`` (default every DC)."""
    n = len(net.dcs)
    roots = list(range(n)) if roots is None else list(roots)
    width = np.minimum(net.cap, net.cap.T)
    usable = net.cap > 0
    inv = np.where(usable, 1.0 / np.where(usable, net.cap, 1.0), 0.0)
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
    net = _net(graph)
    if root not in net.index:
        raise ValueError(f"root {root!r} is not one of the DCs {list(net.dcs)}")
    return _tree(net, _fapt_all(net, [net.index[root]])[0])


def fapt_score(tree_or_root, graph) -> float:
    """FAPT's reference score of a root, in Mbit/s (higher is better).

    For a root name, its :func:`fapt_tree` is scored; a :class:`Tree` is scored as given.
    Level ℓ >= 1 holds the DCs at depth ℓ; its speed is the slowest link (slower direction)
    from a DC at depth ℓ to its parent; score = 1 / Σ_ℓ 1/speed_ℓ. O(m log n) for a root,
    O(n·depth) for a tree.
    """
    net = _net(graph)
    if isinstance(tree_or_root, Tree):
        parent = _parents(net, tree_or_root)
    else:
        if tree_or_root not in net.index:
            raise ValueError(f"root {tree_or_root!r} is not one of the DCs {list(net.dcs)}")
        parent = _fapt_all(net, [net.index[tree_or_root]])[0]
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


def _fapt_candidates(net: _Net, model_bytes: float, chunk_bytes: float, fapt=None) -> list:
    """One FAPT tree per root, trees with the same edges merged (kept at the root whose
    predicted single-tree time is least; ties: the lower index)."""
    by_edges = {}
    for parent in (_fapt_all(net) if fapt is None else fapt):
        key = _edge_key(parent)
        t = _predict(net, [parent], [1.0], model_bytes, chunk_bytes)[0]
        if key not in by_edges or t < by_edges[key][1]:
            by_edges[key] = (parent, t)
    return [p for p, _ in by_edges.values()]


def _distinct(parents: list) -> list:
    """The first tree of every edge set. O(k·n log n)."""
    seen, out = set(), []
    for parent in parents:
        key = _edge_key(parent)
        if key not in seen:
            seen.add(key)
            out.append(parent)
    return out


def _capped_shares(net: _Net, parents: list, max_trees: int):
    """Exact LP shares over ``parents`` with at most ``max_trees`` positive (else the
    heaviest kept and re-optimised). Returns (parents, shares) with shares > 0."""
    shares, _, _ = _solve_shares(net, parents)
    held = [i for i in np.argsort(-shares, kind="stable") if shares[i] > 0]
    if len(held) > max_trees:
        parents = [parents[i] for i in held[:max_trees]]
        shares, _, _ = _solve_shares(net, parents)
        held = [i for i in range(len(parents)) if shares[i] > 0]
    return [parents[i] for i in held], [float(shares[i]) for i in held]


def fapt_policy(graph, model_bytes: float = RESNET18_BYTES,
                chunk_bytes: float = DEFAULT_CHUNK_BYTES, max_trees: int = None) -> list:
    """FAPT with LP shares: ``[(Tree, share)]``, heaviest first.

    The candidates are :func:`fapt_tree` for every root (trees with the same edges are one
    candidate, rooted where the predicted time is least); the LP (:func:`optimal_shares`)
    then picks the root set and each root's share to minimise the busiest link, not a fixed
    formula such as share ∝ :func:`fapt_score`. At most ``max_trees`` (default n) kept.
    ``model_bytes`` and ``chunk_bytes`` only break ties between roots of the same edges.
    O(n·m log n + n^3 + LP).
    """
    net = _net(graph)
    n = len(net.dcs)
    max_trees = min(MAX_POLICY_TREES, n if max_trees is None else int(max_trees))
    parents, shares = _capped_shares(net, _fapt_candidates(net, model_bytes, chunk_bytes),
                                     max_trees)
    order = sorted(range(len(parents)), key=lambda i: -shares[i])
    return [(_tree(net, parents[i]), shares[i]) for i in order]


# --- shallow trees --------------------------------------------------------------------------

def _shallow(net: _Net, root: int) -> np.ndarray:
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
    these are the candidates that keep fill small (:func:`compute_policy`'s ``shallow``
    method gives every root one, with LP shares: on a full mesh, a sharded star). O(n^2)."""
    net = _net(graph)
    if root not in net.index:
        raise ValueError(f"root {root!r} is not one of the DCs {list(net.dcs)}")
    return _tree(net, _shallow(net, net.index[root]))


# --- single trees ----------------------------------------------------------------------------

def _stars(net: _Net) -> list:
    n = len(net.dcs)
    out = []
    for hub in range(n):
        if int((net.cap[hub] > 0).sum()) == n - 1:
            parent = np.full(n, hub, dtype=np.int64)
            parent[hub] = -1
            out.append(parent)
    return out


def _best_single(net: _Net, parents, model_bytes, chunk_bytes):
    best = None
    for parent in parents:
        t = _predict(net, [parent], [1.0], model_bytes, chunk_bytes)[0]
        if best is None or t < best[1]:
            best = (parent, t)
    return best


def best_star(topology_or_graph, model_bytes: float = RESNET18_BYTES,
              chunk_bytes: float = DEFAULT_CHUNK_BYTES):
    """The star (every DC's parent is the hub, as ``scheduler.policy.star_policy``) with the
    least predicted time over the hubs linked to every DC, ties to the lowest index:
    ``(Tree, predicted_s)``, or None if no DC is linked to all others. O(n^2)."""
    net = _net(topology_or_graph)
    best = _best_single(net, _stars(net), model_bytes, chunk_bytes)
    return None if best is None else (_tree(net, best[0]), best[1])


def _single_candidates(net: _Net, fapt=None) -> list:
    slow = np.minimum(net.cap, net.cap.T)
    mbst = _mst(np.where(slow > 0, 1.0 / np.where(slow > 0, slow, 1.0), np.inf))
    return [_best_root(net, mbst)] + _stars(net) + (_fapt_all(net) if fapt is None else fapt)


def best_single_tree(topology_or_graph, model_bytes: float = RESNET18_BYTES,
                     chunk_bytes: float = DEFAULT_CHUNK_BYTES):
    """The single tree (share 1) with the least predicted time among the maximum-bottleneck
    spanning tree (an MST on 1/min(c(u->v), c(v->u)); it minimises the busiest link of any
    one tree) at its best root, every star, every FAPT tree; ties to the first in that
    order. ``(Tree, predicted_s)``. O(n·m log n + n^2)."""
    net = _net(topology_or_graph)
    best = _best_single(net, _single_candidates(net), model_bytes, chunk_bytes)
    return _tree(net, best[0]), best[1]


# --- the policy ------------------------------------------------------------------------------

@dataclass(frozen=True)
class PolicyPlan:
    """A policy, its shares (aligned with ``policy.trees``; ``policy.shares`` holds them
    too), the predicted iteration time, the per-direction busy seconds (every declared
    direction), which method won and each method's prediction."""
    policy: Policy
    shares: tuple
    predicted_s: float
    link_loads: dict
    method: str = ""
    candidates_s: dict = field(default_factory=dict)


def _trim_fill(net: _Net, parents: list, shares: list, model_bytes, chunk_bytes):
    """Drop the tree with the largest pipeline fill and re-solve the shares, while that
    lowers the predicted time (the LP sees only the busiest link; the fill is a max over
    trees). Returns (parents, shares, predicted, busy). O(trees·LP edits) at worst."""
    predicted, busy = _predict(net, parents, shares, model_bytes, chunk_bytes)
    hops = {id(p): _fill_hops(net, p) for p in parents}
    lp = None
    while len(parents) > 1:
        if lp is None:
            _, _, lp = _solve_shares(net, parents)
            if lp is None:
                break
            tree_of = dict(enumerate(parents))
        fills = [min(chunk_bytes, s * model_bytes) * hops[id(p)] for p, s in zip(parents, shares)]
        worst = parents[int(np.argmax(fills))]
        try:
            lp.remove_column(next(t for t, p in tree_of.items() if p is worst))
            lp.solve()
        except LPError:
            break
        new_shares, _ = lp.result()
        rest = [(tree_of[t], float(s)) for t, s in zip(lp.ids(), new_shares) if s > 0]
        cand = [p for p, _ in rest], [s for _, s in rest]
        t, b = _predict(net, cand[0], cand[1], model_bytes, chunk_bytes)
        if not t < predicted * (1 - 1e-12):
            break
        (parents, shares), predicted, busy = cand, t, b
    return parents, shares, predicted, busy


def compute_policy(topology, model_bytes: float, chunk_bytes: float = DEFAULT_CHUNK_BYTES,
                   version: int = 1, start_round: int = 0, max_trees: int = None,
                   epsilon: float = 0.05) -> PolicyPlan:
    """The multi-root policy with the least predicted iteration time for ``model_bytes``.

    Candidates, all scored by the same time model (:func:`predict_iteration_s`), in order
    of preference when predictions tie (fewer or simpler trees first):

    * ``single``: :func:`best_single_tree` (includes the best star);
    * ``fapt``: :func:`fapt_policy` (one FAPT tree per root, LP shares);
    * ``packing``: :func:`pack_trees` (Garg-Könemann + exact LP + column generation);
    * ``shallow``: one :func:`shallow_tree` per root with LP shares (a sharded star on a
      full mesh: least pipeline fill);
    * ``mixed``: packing and shallow trees in one LP (only while they are at most
      :data:`MAX_MIXED_COLUMNS` distinct trees; its LP grows about cubically).

    The LP minimises the busiest link only, so every multi-tree candidate is then trimmed:
    its tree with the largest fill leaves (shares re-solved) while that lowers the
    prediction. At most ``max_trees`` (default n, at most 255) trees. ``topology``: a
    Topology or DiGraph. Returns a :class:`PolicyPlan`; its policy carries the shares,
    heaviest tree first. Cost: pack_trees + O(n^3) for the FAPT and shallow trees + a few
    LPs; about 0.5 s CPU for 64 DCs (see docs/policy.md).
    """
    net = _net(topology)
    max_trees = min(MAX_POLICY_TREES, len(net.dcs) if max_trees is None else int(max_trees))
    fapt = _fapt_all(net)
    single = _best_single(net, _single_candidates(net, fapt), model_bytes, chunk_bytes)[0]
    packing = pack_trees_detail(net, epsilon=epsilon, max_trees=max_trees)
    options = {"single": ([single], [1.0]),
               "fapt": _capped_shares(net, _fapt_candidates(net, model_bytes, chunk_bytes, fapt),
                                      max_trees),
               "packing": ([_parents(net, t) for t in packing.trees], packing.shares)}
    shallow = _distinct([_shallow(net, r) for r in range(len(net.dcs))])
    options["shallow"] = _capped_shares(net, shallow, max_trees)
    union = _distinct(options["packing"][0] + shallow)
    if len(union) <= MAX_MIXED_COLUMNS:
        options["mixed"] = _capped_shares(net, union, max_trees)
    scored = {}
    for name, (parents, shares) in options.items():
        scored[name] = _trim_fill(net, list(parents), list(shares), model_bytes, chunk_bytes)
    order = list(scored)
    method = min(order, key=lambda name: (scored[name][2] * (1 + 1e-12 * order.index(name))))
    parents, shares, predicted, busy = scored[method]
    ranked = sorted(range(len(parents)), key=lambda i: -shares[i])
    shares = tuple(float(shares[i]) for i in ranked)
    shares = shares[:-1] + (1.0 - sum(shares[:-1]),)
    policy = Policy(version=version, start_round=start_round,
                    trees=tuple(_tree(net, parents[i]) for i in ranked), shares=shares)
    loads = {(a, b): float(busy[net.index[a], net.index[b]]) for a, b in net.graph.edges()}
    return PolicyPlan(policy=policy, shares=shares, predicted_s=predicted, link_loads=loads,
                      method=method, candidates_s={k: v[2] for k, v in scored.items()})


# --- timing ----------------------------------------------------------------------------------

def random_full_mesh(n: int, seed: int, low: float = 10.0, high: float = 100.0) -> Topology:
    """n DCs dc0.., full mesh, each direction uniform in [low, high) Mbit/s from
    ``numpy.random.default_rng(seed)``, rounded to 0.1. O(n^2)."""
    rng = np.random.default_rng(seed)
    dcs = tuple(f"dc{i}" for i in range(n))
    links = []
    for i in range(n):
        for j in range(i + 1, n):
            ab, ba = rng.uniform(low, high, size=2)
            links.append(Link(dcs[i], dcs[j], round(float(ab), 1), round(float(ba), 1)))
    return Topology(f"mesh{n}", dcs, tuple(links))


def time_policy(n: int, seed: int, model_bytes: float = RESNET18_BYTES) -> float:
    """CPU seconds (process time, so other load on the machine inflates it less than wall
    time) of :func:`compute_policy` on :func:`random_full_mesh` (n, seed); building the
    topology is not timed."""
    topology = random_full_mesh(n, seed)
    start = time.process_time()
    compute_policy(topology, model_bytes)
    return time.process_time() - start
