"""A small exact linear-program solver (dense two-phase simplex), so that the scheduler
needs no scipy. Used by :mod:`scheduler.fapt` as cross-check and fallback of its share LP.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class LPError(ValueError):
    """The linear program is infeasible or unbounded."""


@dataclass
class LPResult:
    x: np.ndarray              # optimal point
    value: float               # c @ x
    duals_ub: np.ndarray       # y_i = d value / d b_ub[i] (<= 0 for a minimisation)
    duals_eq: np.ndarray       # d value / d b_eq[i]
    pivots: int


def _pivot(tab: np.ndarray, row: int, col: int) -> None:
    tab[row] /= tab[row, col]
    factor = tab[:, col].copy()
    factor[row] = 0.0
    tab -= np.outer(factor, tab[row])


def _run_simplex(tab, basis, cost, allowed, tol, max_pivots):
    """Minimise ``cost`` over the tableau (last column: rhs). Dantzig's rule, switching to
    Bland's (which cannot cycle) after 20 degenerate pivots in a row. Returns pivots done."""
    m = tab.shape[0]
    pivots = degenerate = 0
    bland = False
    while True:
        reduced = cost - cost[basis] @ tab[:, :-1]
        reduced[~allowed] = 0.0
        candidates = np.flatnonzero(reduced < -tol)
        if candidates.size == 0:
            return pivots
        col = int(candidates[0]) if bland else int(candidates[np.argmin(reduced[candidates])])
        column = tab[:, col]
        positive = column > tol
        if not positive.any():
            raise LPError("the linear program is unbounded")
        ratios = np.full(m, np.inf)
        ratios[positive] = tab[positive, -1] / column[positive]
        best = ratios.min()
        ties = np.flatnonzero(ratios <= best + tol * max(1.0, abs(best)))
        row = int(ties[np.argmin(basis[ties])]) if bland else int(ties[0])
        degenerate = degenerate + 1 if best <= tol else 0
        bland = bland or degenerate >= 20
        _pivot(tab, row, col)
        basis[row] = col
        pivots += 1
        if pivots > max_pivots:
            raise LPError(f"simplex did not finish in {max_pivots} pivots")


def solve_lp(c, A_ub=None, b_ub=None, A_eq=None, b_eq=None, tol: float = 1e-10) -> LPResult:
    """``min c·x s.t. A_ub x <= b_ub, A_eq x = b_eq, x >= 0`` by a dense two-phase simplex.

    Phase 1 minimises the sum of artificial variables (one per equality row and per
    inequality row with b < 0) from the slack/artificial basis; phase 2 the objective from
    the feasible basis found. Dantzig's pivot rule, Bland's after a run of degenerate pivots,
    so it terminates. Raises :class:`LPError` if infeasible or unbounded. Also returns the
    dual values of the rows (``duals_ub[i] = -(reduced cost of row i's slack)``).

    Each pivot costs O(R·(N + R)) for R rows and N variables; the number of pivots is
    exponential in the worst case (as for every simplex rule) and a small multiple of R in
    practice. Meant for small dense problems (here: <= a few hundred rows, <= 256 variables).
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
    tab = np.zeros((m, width + 1))
    tab[:mu, :n] = A_ub
    tab[mu:, :n] = A_eq
    tab[np.arange(mu), n + np.arange(mu)] = 1.0
    tab[:, -1] = np.concatenate([b_ub, b_eq])
    tab *= sign[:, None]
    tab[art_rows, n + mu + np.arange(na)] = 1.0
    basis = np.empty(m, dtype=np.int64)
    basis[:mu] = n + np.arange(mu)
    basis[art_rows] = n + mu + np.arange(na)
    max_pivots = 50 * (m + width) + 1000
    pivots = 0
    allowed = np.ones(width, dtype=bool)
    if na:
        cost1 = np.zeros(width)
        cost1[n + mu:] = 1.0
        pivots += _run_simplex(tab, basis, cost1, allowed, tol, max_pivots)
        scale = max(1.0, float(np.abs(tab[:, -1]).max()))
        if cost1[basis] @ tab[:, -1] > 1e-9 * scale:
            raise LPError("the linear program is infeasible")
        allowed[n + mu:] = False
        for row in np.flatnonzero(basis >= n + mu):       # drive zero artificials out
            cols = np.flatnonzero(np.abs(tab[row, :n + mu]) > 1e-9)
            if cols.size:
                _pivot(tab, row, int(cols[0]))
                basis[row] = int(cols[0])
            # else: a redundant row; its artificial stays basic at 0 and never moves
    cost2 = np.concatenate([c, np.zeros(mu + na)])
    pivots += _run_simplex(tab, basis, cost2, allowed, tol, max_pivots)
    x = np.zeros(width)
    x[basis] = tab[:, -1]
    reduced = cost2 - cost2[basis] @ tab[:, :-1]
    duals_ub = -reduced[n:n + mu]
    duals_eq = np.zeros(me)
    art_of = {int(r): n + mu + k for k, r in enumerate(art_rows)}
    for i in range(me):
        duals_eq[i] = -sign[mu + i] * reduced[art_of[mu + i]]
    return LPResult(x=np.maximum(x[:n], 0.0), value=float(c @ np.maximum(x[:n], 0.0)),
                    duals_ub=duals_ub, duals_eq=duals_eq, pivots=pivots)
