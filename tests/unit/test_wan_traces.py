"""netstorm.wan.traces: rate traces."""
import math

import pytest

from netstorm.scheduler.topology import Link, Topology, TopologyError
from netstorm.wan.builtin import load_topology
from netstorm.wan.traces import fluctuating_trace, load_trace, mean_rates, rates_at


def topo(dcs, *links, name="t"):
    """links: (a, b, mbps) or (a, b, mbps_ab, mbps_ba)."""
    return Topology(name, tuple(dcs), tuple(Link(l[0], l[1], l[2], l[-1]) for l in links))


# --- traces ----------------------------------------------------------------------------------

def test_fluctuating_trace_is_deterministic():
    t = load_topology("small")
    one = fluctuating_trace(t, 10, 35, 5, 50, seed=1)
    assert one == fluctuating_trace(t, 10, 35, 5, 50, seed=1)
    assert one != fluctuating_trace(t, 10, 35, 5, 50, seed=2)
    assert [ts for ts, _ in one] == [0, 10, 20, 30]
    for _, rates in one:
        assert set(rates) == set(t.rates())
        assert all(5 <= r <= 50 and r == round(r, 1) for r in rates.values())
    sym = fluctuating_trace(t, 10, 35, 5, 50, seed=1, symmetric=True)
    assert all(r[(a, b)] == r[(b, a)] for _, r in sym for a, b in r)
    with pytest.raises(TopologyError, match="period_s > 0"):
        fluctuating_trace(t, 0, 35, 5, 50, seed=1)


def test_paper9_fluctuating():
    trace = load_trace("paper9-fluctuating", period_s=180, duration_s=3600)
    assert len(trace) == 20 and trace[1][0] == 180
    assert trace == load_trace("paper9-fluctuating", period_s=180, duration_s=3600)
    assert all(len(r) == 26 and all(20 <= v <= 155 for v in r.values()) for _, r in trace)
    assert len(load_trace("paper9-fluctuating")) == 20           # default period 180 s
    with pytest.raises(TopologyError, match="unknown trace 'x'"):
        load_trace("x")


def test_mean_rates_hand_checked():
    ab, ba = ("a", "b"), ("b", "a")
    trace = [(0, {ab: 10, ba: 20}), (30, {ab: 40}), (60, {ab: 1000})]
    mean = mean_rates(trace, 60)
    assert mean.rate("a", "b") == pytest.approx(25) and mean.rate("b", "a") == pytest.approx(20)
    base = topo(["a", "b"], ("a", "b", 4, 8))
    late = [(15, {ab: 10}), (45, {ba: 2})]
    mean = mean_rates(late, 60, base)        # ab: 4 for 15 s then 10; ba: 8 for 45 s then 2
    assert mean.rate("a", "b") == pytest.approx((4 * 15 + 10 * 45) / 60)
    assert mean.rate("b", "a") == pytest.approx((8 * 45 + 2 * 15) / 60)
    assert mean.name == "t" and mean.dcs == ("a", "b")
    with pytest.raises(TopologyError, match="does not start at t = 0"):
        mean_rates(late, 60)
    with pytest.raises(TopologyError, match="not a link"):
        mean_rates([(0, {("a", "c"): 1})], 60, base)
    assert rates_at(trace, 45) == {ab: 40, ba: 20}


def test_mean_of_paper9_trace_is_plausible():
    t = load_topology("paper9")
    trace = load_trace("paper9-fluctuating", period_s=20, duration_s=3600)
    mean = mean_rates(trace, 3600, t)
    assert mean.dcs == t.dcs and len(mean.links) == 13
    assert all(70 < r < 105 for r in mean.rates().values())        # ~ (20 + 155) / 2
    assert math.isclose(mean_rates(trace, 3600).rate("dc1", "dc2"), mean.rate("dc1", "dc2"))
