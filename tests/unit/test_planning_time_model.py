"""netstorm.scheduler.planning.time_model: busiest link + pipeline fill, by hand."""
from dataclasses import replace

import pytest

from netstorm.scheduler.planning import (DEFAULT_CHUNK_BYTES, compute_policy, link_loads,
                                         pipeline_fill_s, predict_iteration_s)
from netstorm.geoserver.policy.tree import Tree
from netstorm.scheduler.topology import Topology
from netstorm.wan import load_topology
from planning_cases import BUILTIN, MIB, B, topo, tree


def test_star_prediction_by_hand():
    small = BUILTIN["small"]
    star = tree("dc0", dc1="dc0", dc2="dc0")
    loads = link_loads([(star, 1.0)], small, B)
    assert set(loads) == set(small.rates())
    assert loads[("dc1", "dc2")] == 0 and loads[("dc2", "dc1")] == 0
    assert loads[("dc1", "dc0")] == pytest.approx(8 * B / 40e6)
    fill = 8 * MIB / 40e6 * 2                        # one hop up, one hop down
    assert pipeline_fill_s([(star, 1.0)], small, B, MIB) == pytest.approx(fill)
    assert predict_iteration_s([(star, 1.0)], small, B, MIB) == \
        pytest.approx(8 * B / 40e6 + fill)
    # a model smaller than one chunk travels as one chunk of its own size
    assert pipeline_fill_s([(star, 1.0)], small, 1000, MIB) == pytest.approx(8e3 / 40e6 * 2)


def test_fill_follows_the_slowest_paths_up_and_down():
    line = topo("xyz", ("x", "y", 10, 20), ("y", "z", 40, 80))
    t = tree("x", y="x", z="y")
    up = 1 / 20 + 1 / 80                             # z -> y -> x
    down = 1 / 10 + 1 / 40                           # x -> y -> z
    assert pipeline_fill_s([(t, 1.0)], line, B, MIB) == pytest.approx(8 * MIB / 1e6 * (up + down))


def test_each_hop_adds_its_delay_to_the_fill_once_up_and_once_down():
    line = topo("xyz", ("x", "y", 10, 20), ("y", "z", 40, 80))
    slow = Topology("xyz", line.dcs, tuple(replace(l, latency_ms=ms)
                                            for l, ms in zip(line.links, (30.0, 70.0))))
    t = tree("x", y="x", z="y")
    base = pipeline_fill_s([(t, 1.0)], line, B, MIB)
    assert pipeline_fill_s([(t, 1.0)], slow, B, MIB) == pytest.approx(base + 2 * 0.1)
    assert predict_iteration_s([(t, 1.0)], slow, B, MIB) == \
        pytest.approx(predict_iteration_s([(t, 1.0)], line, B, MIB) + 0.2)
    # rooted in the middle, the slowest paths (x's, over the 10/20 Mbit/s link) pay its
    # 30 ms up and down; z's 70 ms hop is faster in all and adds nothing
    mid = tree("y", x="y", z="y")
    assert pipeline_fill_s([(mid, 1.0)], slow, B, MIB) - \
        pipeline_fill_s([(mid, 1.0)], line, B, MIB) == pytest.approx(0.06)


def test_latency_steers_the_planner_to_shallower_trees():
    """paper9 with its delays: the plan is predicted slower than without them by less than
    its trees' deepest delays, and compute_policy still beats its own single tree."""
    paper9 = load_topology("paper9")
    with_delay = compute_policy(paper9, B)
    without = compute_policy(paper9.without_latency(), B)
    assert with_delay.predicted_s > without.predicted_s
    assert with_delay.predicted_s <= with_delay.candidates_s["single"]
    again = predict_iteration_s(with_delay, paper9, B)
    assert again == pytest.approx(with_delay.predicted_s)


def test_time_model_rejects_trees_over_missing_links():
    with pytest.raises(ValueError, match="usable both ways"):
        predict_iteration_s([(tree("dc1", dc2="dc1", dc3="dc2", dc4="dc1", dc5="dc1",
                                   dc6="dc1", dc7="dc1", dc8="dc1", dc9="dc1"), 1.0)],
                            BUILTIN["paper9"], B)


def test_small_prediction_equals_the_hand_optimum():
    # 3 DCs at 40 Mbit/s: the 3 two-edge paths with 1/3 each put 2/3 of the model on every
    # direction; each path is rooted in its middle: one hop up and one down.
    plan = compute_policy(BUILTIN["small"], B)
    expected = 8 * B * (2 / 3) / 40e6 + 2 * 8 * DEFAULT_CHUNK_BYTES / 40e6
    assert plan.predicted_s == pytest.approx(expected, rel=1e-9)
    assert sorted(plan.shares) == pytest.approx([1 / 3] * 3, abs=1e-9)
    for t in plan.policy.trees:
        assert len(t.children(t.root)) == 2


def test_a_split_tree_loads_each_direction_of_its_own_trees_and_fills_along_them():
    """Aggregation y -> x <- z, broadcast x -> z -> y: the loads land on y->x, z->x, x->z
    and z->y only; the fill is the slowest path up plus the slowest path down."""
    tri = topo("xyz", ("x", "y", 10, 20), ("x", "z", 40, 80), ("y", "z", 25, 50))
    t = Tree("x", {"x": None, "y": "x", "z": "x"}, down={"x": None, "z": "x", "y": "z"})
    loads = link_loads([(t, 1.0)], tri, B)
    used = {d for d, s in loads.items() if s > 0}
    assert used == {("y", "x"), ("z", "x"), ("x", "z"), ("z", "y")}
    assert loads[("z", "y")] == pytest.approx(8 * B / 50e6)
    up = max(1 / 20, 1 / 80)                          # y -> x, z -> x
    down = 1 / 40 + 1 / 50                            # x -> z -> y
    assert pipeline_fill_s([(t, 1.0)], tri, B, MIB) == pytest.approx(8 * MIB / 1e6 * (up + down))


def test_path_sums_refuse_a_parent_array_with_a_cycle():
    """The fill's path sums double path lengths each step; a cycle never reaches the root
    and is refused rather than looped on."""
    import numpy as np
    from netstorm.scheduler.planning.time_model import _depths
    cap = np.full((4, 4), 10.0)
    lat = np.zeros((4, 4))
    assert list(_depths(np.array([-1, 0, 1, 2]), cap, lat, 10.0)) == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="cycle"):
        _depths(np.array([-1, 2, 1, 0]), cap, lat, 10.0)


def test_goodput_charges_every_byte_its_framing_but_not_the_delays():
    from netstorm.scheduler.planning import TCP_GOODPUT
    small = BUILTIN["small"]
    star = tree("dc0", dc1="dc0", dc2="dc0")
    plain = predict_iteration_s([(star, 1.0)], small, B, MIB)
    assert TCP_GOODPUT == pytest.approx(1448 / 1514)
    assert predict_iteration_s([(star, 1.0)], small, B, MIB, goodput=0.5) == \
        pytest.approx(2 * plain)
    fill = pipeline_fill_s([(star, 1.0)], small, B, MIB)
    assert pipeline_fill_s([(star, 1.0)], small, B, MIB, goodput=TCP_GOODPUT) == \
        pytest.approx(fill / TCP_GOODPUT)
    line = topo("xy", ("x", "y", 10, 20))
    slow = Topology("xy", line.dcs, tuple(replace(l, latency_ms=50.0) for l in line.links))
    t = tree("x", y="x")
    mbit = 8 * MIB / 1e6
    assert pipeline_fill_s([(t, 1.0)], slow, B, MIB, goodput=0.5) == \
        pytest.approx(2 * mbit / 20 + 0.05 + 2 * mbit / 10 + 0.05)
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError, match="goodput"):
            predict_iteration_s([(star, 1.0)], small, B, MIB, goodput=bad)
