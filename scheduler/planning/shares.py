"""Optimal shares for fixed trees: the share LP, solved exactly.

Choosing shares for fixed trees is the linear program ``min z s.t. Σ_t s_t·a_te/c_e <= z
for every directed link e, Σ_t s_t = 1, s >= 0`` (a_te = 1 if tree t uses e). It is solved
as the equivalent ``max Σp s.t. A p <= 1`` (s = p/Σp) with rows and columns generated
lazily (:class:`GameLP`, on the planner's one simplex, :mod:`.simplex`);
:func:`share_lp_reference` re-solves it from scratch with :func:`.simplex.solve_lp`, the
cross-check and fallback. k = trees, r = rows in the tableau.
"""
from __future__ import annotations

import numpy as np

from .network import Net, as_net, down_of, parent_array, up_of
from .simplex import LPError, Tableau, solve_lp

__all__ = ["GameLP", "SHARE_FLOOR", "capped_shares", "column", "directions", "optimal_shares",
           "share_lp_reference", "solve_shares"]

SHARE_FLOOR = 1e-12                # LP shares below this are zeroed (then renormalised)


def directions(net: Net) -> np.ndarray:
    """Flat indices (i·n + j) of the usable directions: the rows of the share LP. O(n^2)."""
    return np.flatnonzero(net.cap.reshape(-1) > 0)


def column(net: Net, tree, rows: np.ndarray) -> np.ndarray:
    """One tree's LP column over ``rows``: c_min/c_d on each direction it uses (twice on a
    direction a split tree uses both up and down), else 0. O(n + rows)."""
    up, down = up_of(tree), down_of(tree)
    n = len(up)
    child = np.flatnonzero(up >= 0)
    bottom = np.flatnonzero(down >= 0)
    used = np.concatenate([child * n + up[child], down[bottom] * n + bottom])
    col = np.zeros(rows.size)
    flat = net.cap.reshape(-1)
    np.add.at(col, np.searchsorted(rows, used), flat[rows].min() / flat[used])
    return col


def _normalised(p: np.ndarray, U: np.ndarray):
    """(shares ∝ p, tiny shares zeroed then renormalised; z = max_d (U s)_d). O(U)."""
    shares = p / p.sum()
    shares[shares < SHARE_FLOOR] = 0.0
    shares /= shares.sum()
    return shares, float((U @ shares).max())


def _start_rows(U: np.ndarray) -> set:
    """The rows the share LP starts with: each column's largest entry and the busiest rows
    under equal shares (as many as columns). O(U)."""
    start = set(int(r) for r in np.argmax(U, axis=0))
    return start | set(int(r) for r in np.argsort(-U.sum(axis=1), kind="stable")[:U.shape[1]])


class GameLP(Tableau):
    """``max Σ_j p_j s.t. U p <= 1, p >= 0`` for U >= 0 (rows: directions, columns: trees).

    With s = p/Σp and z = 1/Σp this is ``min z s.t. U s <= z, Σ s = 1``: the share LP. The
    origin is feasible, so no phase 1 is needed. One dense tableau is kept and edited:

    * rows join lazily (constraint generation: each column's largest entry and the busiest
      rows under equal shares first, then rows the optimum violates; a new row keeps the
      basis dual feasible, so the dual simplex continues), and rows far from binding (slack
      > 1/2) leave after each solve, which keeps the tableau a small multiple of k tall;
    * columns join (column generation; the primal simplex continues) and leave (a leaving
      column's cost is raised so the primal simplex drives it to zero, then it is deleted).

    Pivots follow the :class:`~.simplex.Tableau` rules. A pivot costs O(r·(k + r)) for r
    rows and k columns in the tableau.
    """

    def __init__(self, n_rows: int, tol: float = 1e-9):
        super().__init__(np.zeros((0, 1)), np.zeros(1), np.zeros(0, dtype=np.int64), tol,
                         max_pivots=200_000, name="share LP")
        self.n_rows = n_rows
        self.colvar = []                    # tableau column -> ("p", tree id) | ("s", U row)
        self.cols = {}                      # tree id -> its U column (every row)
        self.active = set()                 # U rows in the tableau
        self._next = 0
        self._U = None

    @classmethod
    def build(cls, U: np.ndarray, tol: float = 1e-9) -> "GameLP":
        """An LP over U's columns (tree ids 0..k-1), not yet solved. O(U + k·pivot)."""
        lp = cls(U.shape[0], tol)
        lp.add_rows(sorted(r for r in _start_rows(U) if U[r].any()))
        for j in range(U.shape[1]):
            lp.add_column(U[:, j])
        return lp

    # --- bookkeeping
    def ids(self) -> list:
        """The tree ids of the columns, in insertion order. O(k)."""
        return list(self.cols)

    def U(self) -> np.ndarray:
        """The constraint matrix over every row (cached). O(rows·k)."""
        if self._U is None:
            self._U = np.column_stack([self.cols[i] for i in self.cols])
        return self._U

    def p(self) -> np.ndarray:
        """Values of the columns, in :meth:`ids` order. O(r + k)."""
        pos = {tid: k for k, tid in enumerate(self.cols)}
        p = np.zeros(len(pos))
        for i, b in enumerate(self.basis):
            kind, ident = self.colvar[b]
            if kind == "p":
                p[pos[ident]] = max(self.T[i, -1], 0.0)
        return p

    def duals(self) -> np.ndarray:
        """Row duals u >= 0 (zero off the tableau): U^T u >= 1 on every column, Σu = Σp.
        O(rows + r + k)."""
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

    # --- edits
    def add_rows(self, rows) -> None:
        """Bring U rows into the tableau (:meth:`solve` runs the dual simplex).
        O(new rows·r·(k + r))."""
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
        runs the primal simplex). O(r·(k + r))."""
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
        """Delete a tree column and re-optimise. O(pivots·r·(k + r))."""
        c = self.colvar.index(("p", tid))
        rows = np.flatnonzero(self.basis == c)
        if rows.size:                       # basic: cost -1 -> +1 drives it to zero
            r = int(rows[0])
            self.obj -= 2.0 * self.T[r]
            self.obj[c] += 2.0
            self.primal()
            rows = np.flatnonzero(self.basis == c)
            if rows.size:                   # basic at zero: one degenerate pivot out
                r = int(rows[0])
                row = np.abs(self.T[r, :-1])
                row[c] = 0.0
                j = int(np.argmax(row))
                if row[j] <= self.tol:
                    raise LPError("share LP: cannot pivot a column out")
                self.pivot(r, j)
        self._delete_columns([c])
        del self.cols[tid]
        self._U = None
        self.primal()

    def purge(self, slack: float = 0.5) -> None:
        """Drop rows whose slack is basic and above ``slack`` (far from binding): the
        tableau minus that row and that slack's column is the tableau without the row.
        O(r·(k + r))."""
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

    def solve(self) -> None:
        """Optimise, adding violated rows until none is: then optimal over all rows.
        O(rounds·(rows·k + pivots·r·(k + r)))."""
        self.dual()
        self.primal()
        batch = len(self.cols) // 2 + 8
        while True:
            viol = self.U() @ self.p() - 1.0
            order = np.argsort(-viol, kind="stable")[:batch + len(self.active)]
            new = [int(r) for r in order if viol[r] > self.tol and int(r) not in self.active]
            if not new:
                break
            self.add_rows(new[:batch])
            self.dual()
            self.primal()
        self.purge()

    def result(self):
        """(shares in :meth:`ids` order, z = max_d (U s)_d): tiny shares zeroed (then
        renormalised), z evaluated on every row. O(rows·k)."""
        return _normalised(self.p(), self.U())


def share_lp_reference(U: np.ndarray, tol: float = 1e-9):
    """The same LP, re-solved from scratch by :func:`.simplex.solve_lp` in every
    constraint-generation round (slower; a cross-check and the fallback). Returns
    (shares, z). O(rounds·solve_lp)."""
    k = U.shape[1]
    active = _start_rows(U)
    while True:
        idx = np.array(sorted(active))
        p = solve_lp(-np.ones(k), A_ub=U[idx], b_ub=np.ones(idx.size)).x
        viol = U @ p - 1.0
        new = [int(i) for i in np.argsort(-viol, kind="stable")[:2 * k + 16]
               if viol[i] > tol and int(i) not in active]
        if not new:
            break
        active |= set(new)
    return _normalised(p, U)


def solve_shares(net: Net, parents: list, rows: np.ndarray = None):
    """Exact shares for ``parents``: (shares, z in 1/(Mbit/s), solved GameLP or None).
    z·8·B/1e6 is the busiest link's seconds; the LP's tree ids are 0..k-1 in order.
    O(k·n^2) to build, then the LP (:func:`optimal_shares`)."""
    rows = directions(net) if rows is None else rows
    U = np.column_stack([column(net, p, rows) for p in parents])
    unit = net.cap.reshape(-1)[rows].min()
    try:
        lp = GameLP.build(U)
        lp.solve()
        shares, z = lp.result()
    except LPError:                       # numerical trouble: the from-scratch solver
        lp = None
        shares, z = share_lp_reference(U)
    return shares, z / unit, lp


def capped_shares(net: Net, parents: list, max_trees: int):
    """Exact LP shares over ``parents`` with at most ``max_trees`` positive (else the
    heaviest kept and re-optimised). Returns (parents, shares) with shares > 0.
    O(k·n^2) + at most two LPs (:func:`optimal_shares`)."""
    shares, _, _ = solve_shares(net, parents)
    held = [i for i in np.argsort(-shares, kind="stable") if shares[i] > 0]
    if len(held) > max_trees:
        parents = [parents[i] for i in held[:max_trees]]
        shares, _, _ = solve_shares(net, parents)
        held = [i for i in range(len(parents)) if shares[i] > 0]
    return [parents[i] for i in held], [float(shares[i]) for i in held]


def optimal_shares(trees, topology_or_graph, model_bytes: float = 1.0):
    """Shares minimising the busiest link's time for the given trees, exactly.

    Returns ``(shares, seconds)``: shares aligned with ``trees`` (>= 0, sum 1) and the busiest
    link's busy time 8·B·z/1e6 for ``model_bytes`` B. The LP (module docstring) has k
    variables and one row per usable direction; it is solved as the equivalent game LP
    ``max Σp s.t. A p <= 1`` by :class:`GameLP`: dense simplex with constraint generation,
    so only rows that bind or were violated on the way enter the tableau. Identical trees
    split one share arbitrarily. O(k·n^2) to build, then simplex pivots of O(r·(k + r)) for
    r active rows (r is typically 2-5·k).
    """
    net = as_net(topology_or_graph)
    parents = [parent_array(net, t) for t in trees]
    if not parents:
        raise ValueError("no trees")
    shares, z, _ = solve_shares(net, parents)
    return [float(s) for s in shares], 8.0 * model_bytes * z / 1e6
