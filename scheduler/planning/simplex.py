"""The one simplex of the planner (dense, exact; so that the scheduler needs no scipy).

:class:`Tableau` is the pivoting core: a dense tableau, its reduced-cost row and basis, one
pivot operation, the primal simplex and the dual simplex, with one pivot rule and one
anti-cycling rule: Dantzig's rule (most negative reduced cost; in the dual, most negative
right-hand side) with ratio-test ties to the first row, switching for the rest of the run
to Bland's rule (lowest index; ties to the lowest basic variable) after
:data:`DEGENERATE_RUN` degenerate pivots in a row, so that neither simplex cycles. Its two
users: :func:`solve_lp`, a general two-phase solver (the cross-check and fallback of the
share LP), and :class:`~netstorm.scheduler.planning.shares.GameLP`, the share LP with rows
and columns generated lazily.

A pivot costs O(R·(N + R)) for R rows and N columns; the number of pivots is exponential in
the worst case (as for every simplex rule) and a small multiple of R in practice. Meant for
small dense problems (here: <= a few hundred rows, <= 256 variables).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DEGENERATE_RUN", "LPError", "LPResult", "Tableau", "solve_lp"]

DEGENERATE_RUN = 50                # Dantzig's rule until this many degenerate pivots in a row


class LPError(ValueError):
    """The linear program is infeasible or unbounded (or the simplex gave up)."""


@dataclass
class LPResult:
    x: np.ndarray              # optimal point
    value: float               # c @ x
    duals_ub: np.ndarray       # y_i = d value / d b_ub[i] (<= 0 for a minimisation)
    duals_eq: np.ndarray       # d value / d b_eq[i]
    pivots: int


class Tableau:
    """A minimisation in tableau form: rows ``T`` (last column: right-hand side, the values
    of the basic variables), reduced costs ``obj`` (last entry: -objective) and ``basis``
    (the basic column of each row). ``tol`` is the zero of every test; more than
    ``max_pivots`` pivots over the tableau's life raise :class:`LPError` (``name`` says
    which program in messages)."""

    def __init__(self, T: np.ndarray, obj: np.ndarray, basis: np.ndarray, tol: float,
                 max_pivots: int, name: str = "the linear program"):
        self.T, self.obj, self.basis = T, obj, basis
        self.tol, self.max_pivots, self.name = tol, max_pivots, name
        self.pivots = 0

    def price(self, cost: np.ndarray) -> None:
        """Make ``cost`` (one entry per column) the objective: reduced costs from the basis.
        O(R·N)."""
        self.obj = np.append(cost - cost[self.basis] @ self.T[:, :-1],
                             -(cost[self.basis] @ self.T[:, -1]))

    def pivot(self, r: int, j: int) -> None:
        """Column ``j`` enters the basis in row ``r``. O(R·N)."""
        T = self.T
        T[r] /= T[r, j]
        col = T[:, j].copy()
        col[r] = 0.0
        T -= np.outer(col, T[r])
        self.obj -= self.obj[j] * T[r]
        self.basis[r] = j
        self.pivots += 1
        if self.pivots > self.max_pivots:
            raise LPError(f"{self.name}: the simplex did not finish in {self.max_pivots} "
                          f"pivots")

    @staticmethod
    def _degenerate(step: float, tol: float, run: int, bland: bool):
        """The anti-cycling rule's state after a pivot of length ``step``."""
        run = run + 1 if step <= tol else 0
        return run, bland or run >= DEGENERATE_RUN

    def primal(self, allowed: np.ndarray = None) -> None:
        """The primal simplex from a primal feasible basis (right-hand side >= 0) to an
        optimum; only ``allowed`` columns (default all) enter. Raises :class:`LPError` if
        unbounded. O(R·N) per pivot."""
        tol, run, bland = self.tol, 0, False
        while True:
            d = self.obj[:-1] if allowed is None else np.where(allowed, self.obj[:-1], 0.0)
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
                raise LPError(f"{self.name} is unbounded")
            ratios = self.T[pos, -1] / col[pos]
            best = ratios.min()
            ties = pos[ratios <= best + tol]
            r = int(ties[np.argmin(self.basis[ties])]) if bland else int(ties[0])
            run, bland = self._degenerate(best, tol, run, bland)
            self.pivot(r, j)

    def dual(self) -> None:
        """The dual simplex from a dual feasible basis (reduced costs >= 0) to a primal
        feasible one. Raises :class:`LPError` if the program is infeasible. O(R·N) per
        pivot."""
        tol, run, bland = self.tol, 0, False
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
                raise LPError(f"{self.name} is infeasible")
            ratios = np.maximum(self.obj[cand], 0.0) / -row[cand]
            best = ratios.min()
            j = int(cand[np.flatnonzero(ratios <= best + tol)[0]])
            run, bland = self._degenerate(best, tol, run, bland)
            self.pivot(r, j)


def solve_lp(c, A_ub=None, b_ub=None, A_eq=None, b_eq=None, tol: float = 1e-10) -> LPResult:
    """``min c·x s.t. A_ub x <= b_ub, A_eq x = b_eq, x >= 0`` by a dense two-phase simplex.

    Phase 1 minimises the sum of artificial variables (one per equality row and per
    inequality row with b < 0) from the slack/artificial basis; phase 2 the objective from
    the feasible basis found, both by :meth:`Tableau.primal` (so it terminates). Raises
    :class:`LPError` if infeasible or unbounded. Also returns the dual values of the rows
    (``duals_ub[i] = -(reduced cost of row i's slack)``).

    O(R·(N + R)) per pivot for R rows and N variables; the number of pivots is exponential
    in the worst case and a small multiple of R in practice.
    """
    c = np.asarray(c, dtype=float)
    n = c.size
    A_ub = np.zeros((0, n)) if A_ub is None else np.asarray(A_ub, dtype=float).reshape(-1, n)
    b_ub = np.zeros(0) if b_ub is None else np.asarray(b_ub, dtype=float).reshape(-1)
    A_eq = np.zeros((0, n)) if A_eq is None else np.asarray(A_eq, dtype=float).reshape(-1, n)
    b_eq = np.zeros(0) if b_eq is None else np.asarray(b_eq, dtype=float).reshape(-1)
    mu, me = len(b_ub), len(b_eq)
    if A_ub.shape[0] != mu or A_eq.shape[0] != me:
        raise ValueError("A_ub/b_ub or A_eq/b_eq have different numbers of rows")
    m = mu + me
    sign = np.concatenate([np.where(b_ub < 0, -1.0, 1.0), np.where(b_eq < 0, -1.0, 1.0)])
    needs_art = np.concatenate([b_ub < 0, np.ones(me, dtype=bool)])
    art_rows = np.flatnonzero(needs_art)
    na = art_rows.size
    width = n + mu + na
    T = np.zeros((m, width + 1))
    T[:mu, :n] = A_ub
    T[mu:, :n] = A_eq
    T[np.arange(mu), n + np.arange(mu)] = 1.0
    T[:, -1] = np.concatenate([b_ub, b_eq])
    T *= sign[:, None]
    T[art_rows, n + mu + np.arange(na)] = 1.0
    basis = np.empty(m, dtype=np.int64)
    basis[:mu] = n + np.arange(mu)
    basis[art_rows] = n + mu + np.arange(na)
    tab = Tableau(T, np.zeros(width + 1), basis, tol, 50 * (m + width) + 1000)
    allowed = np.ones(width, dtype=bool)
    if na:
        cost1 = np.zeros(width)
        cost1[n + mu:] = 1.0
        tab.price(cost1)
        tab.primal()
        scale = max(1.0, float(np.abs(T[:, -1]).max()))
        if cost1[basis] @ T[:, -1] > 1e-9 * scale:
            raise LPError("the linear program is infeasible")
        allowed[n + mu:] = False
        for row in np.flatnonzero(basis >= n + mu):       # drive zero artificials out
            cols = np.flatnonzero(np.abs(T[row, :n + mu]) > 1e-9)
            if cols.size:
                tab.pivot(row, int(cols[0]))
            # else: a redundant row; its artificial stays basic at 0 and never moves
    cost2 = np.concatenate([c, np.zeros(mu + na)])
    tab.price(cost2)
    tab.primal(allowed)
    x = np.zeros(width)
    x[basis] = T[:, -1]
    reduced = cost2 - cost2[basis] @ T[:, :-1]
    duals_ub = -reduced[n:n + mu]
    duals_eq = np.zeros(me)
    art_of = {int(r): n + mu + k for k, r in enumerate(art_rows)}
    for i in range(me):
        duals_eq[i] = -sign[mu + i] * reduced[art_of[mu + i]]
    x = np.maximum(x[:n], 0.0)
    return LPResult(x=x, value=float(c @ x), duals_ub=duals_ub, duals_eq=duals_eq,
                    pivots=tab.pivots)
