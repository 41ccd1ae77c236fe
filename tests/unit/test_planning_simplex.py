"""netstorm.scheduler.planning.simplex: the two-phase solver on hand-checked programs."""
import pytest

from netstorm.scheduler.planning import LPError, solve_lp


def test_solve_lp_textbook_optimum_and_duals():
    # max 3x + 5y s.t. x <= 4, 2y <= 12, 3x + 2y <= 18: optimum (2, 6) = 36, shadow prices
    # (0, 3/2, 1).
    res = solve_lp([-3, -5], A_ub=[[1, 0], [0, 2], [3, 2]], b_ub=[4, 12, 18])
    assert res.x == pytest.approx([2, 6])
    assert res.value == pytest.approx(-36)
    assert res.duals_ub == pytest.approx([0, -1.5, -1])


def test_solve_lp_equalities_and_greater_equal_rows():
    # min x + y s.t. x + 2y >= 4, x - y = 1  ->  y = 1, x = 2
    res = solve_lp([1, 1], A_ub=[[-1, -2]], b_ub=[-4], A_eq=[[1, -1]], b_eq=[1])
    assert res.x == pytest.approx([2, 1])
    assert res.value == pytest.approx(3)


def test_solve_lp_reports_infeasible_and_unbounded():
    with pytest.raises(LPError, match="infeasible"):
        solve_lp([1], A_ub=[[1], [-1]], b_ub=[1, -2])
    with pytest.raises(LPError, match="unbounded"):
        solve_lp([-1, 0], A_ub=[[1, -1]], b_ub=[1])


def test_solve_lp_does_not_cycle_on_beales_example():
    # Beale (1955): Dantzig's rule with naive ties cycles here; optimum -5/4 at (1, 0, 1, 0).
    c = [-0.75, 20, -0.5, 6]
    A = [[0.25, -8, -1, 9], [0.5, -12, -0.5, 3], [0, 0, 1, 0]]
    res = solve_lp(c, A_ub=A, b_ub=[0, 0, 1])
    assert res.value == pytest.approx(-1.25)
    assert res.x == pytest.approx([1, 0, 1, 0])
