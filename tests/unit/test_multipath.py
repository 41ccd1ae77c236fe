"""scheduler.multipath: relays level the busiest link with idle two-hop paths."""
import pytest

from netstorm.scheduler.planning import best_single_tree, compute_policy, link_loads
from netstorm.scheduler.multipath import plan_relays, predicted_busiest_s, to_json
from netstorm.wan import load_topology

B = 46.8e6


def test_a_single_tree_on_hetero6_gets_much_faster_with_relays():
    topology = load_topology("hetero6")
    busy = link_loads([(best_single_tree(topology, B)[0], 1.0)], topology, B)
    plan = plan_relays(busy, topology.rates())
    before, after = max(busy.values()), predicted_busiest_s(busy, topology.rates(), plan)
    assert after < 0.5 * before
    for (u, v), parts in plan.items():
        assert busy[(u, v)] > 0                                  # only tree links shed
        assert 0 < sum(f for _, f in parts) < 1
        for w, _ in parts:
            assert (u, w) in topology.rates() and (w, v) in topology.rates()
    rows = to_json(plan)
    assert all(len(r) == 4 for r in rows)


@pytest.mark.parametrize("name", ["paper9", "small"])
def test_no_relays_where_the_trees_already_meet_the_busiest_cut(name):
    topology = load_topology(name)
    busy = link_loads(compute_policy(topology, B), topology, B)
    assert plan_relays(busy, topology.rates()) == {}


def test_levelled_hand_example():
    # a -> b carries 100 Mbit at 10 Mbit/s (10 s); a -> c -> b is idle at 40 Mbit/s each.
    rates = {("a", "b"): 10.0, ("a", "c"): 40.0, ("c", "b"): 40.0}
    busy = {("a", "b"): 10.0}
    plan = plan_relays(busy, rates, overhead=0.0)
    (w, f), = plan[("a", "b")]
    # x moved: 10 - x/10 = x/40  ->  x = 80 Mbit, f = 0.8, both paths 2 s
    assert w == "c" and f == pytest.approx(0.8, abs=1e-6)
    assert predicted_busiest_s(busy, rates, plan, 0.0) == pytest.approx(2.0, abs=1e-6)
    # with the relay's overhead charged, fewer bytes move: 10 - x/10 = 1.1·x/40
    (w, f), = plan_relays(busy, rates, overhead=0.1)[("a", "b")]
    assert f == pytest.approx(10 / (0.1 + 1.1 / 40) / 100, abs=1e-6)


def test_a_relay_that_gains_a_few_percent_is_not_planned():
    """a -> b busy 10 s at 10 Mbit/s; the detour a -> c -> b is already busy 9.6 s at
    100 Mbit/s: levelling would gain about 4%, less than MIN_GAIN (a gain above it is
    planned)."""
    rates = {("a", "b"): 10.0, ("a", "c"): 100.0, ("c", "b"): 100.0}
    assert plan_relays({("a", "b"): 10.0, ("a", "c"): 9.6, ("c", "b"): 9.6}, rates) == {}
    assert plan_relays({("a", "b"): 10.0, ("a", "c"): 8.0, ("c", "b"): 8.0}, rates) != {}
