"""netstorm.scheduler.planning.compute: compute_policy on many graphs, and its speed."""
import time

import pytest

from netstorm.bench.planning import random_full_mesh, time_policy
from netstorm.geoserver.policy.tree import Policy
from netstorm.scheduler.planning import (DEFAULT_CHUNK_BYTES, MAX_POLICY_TREES, TREES_PER_DC,
                                         PolicyPlan, best_single_tree, best_star,
                                         compute_policy, cut_lower_bound, fapt_policy,
                                         link_loads, lower_bound_s, pack_trees,
                                         pack_trees_detail, predict_iteration_s)
from netstorm.scheduler.topology import Topology
from planning_cases import BUILTIN, RANDOM, B, topo


def check_plan(plan: PolicyPlan, topology: Topology):
    assert isinstance(plan.policy, Policy)
    assert len(plan.shares) == len(plan.policy.trees) <= min(TREES_PER_DC * len(topology.dcs),
                                                             MAX_POLICY_TREES)
    assert min(plan.shares) > 0 and abs(sum(plan.shares) - 1) <= 1e-9
    assert plan.policy.shares == pytest.approx(plan.shares, abs=1e-12)
    for t in plan.policy.trees:
        t.validate(topology.dcs)
        for dc, up in [*t.parent.items(), *t.down_parent.items()]:
            if up is not None:
                assert topology.link(dc, up) is not None, f"{dc}-{up} is not a link"
    assert plan.predicted_s == pytest.approx(predict_iteration_s(plan, topology, B), rel=1e-12)
    assert plan.link_loads == pytest.approx(link_loads(plan, topology, B), rel=1e-12)
    assert Policy.from_json(plan.policy.to_json(), topology.dcs) == plan.policy


@pytest.mark.parametrize("topology", RANDOM, ids=lambda t: t.name)
def test_random_partial_meshes(topology):
    plan = compute_policy(topology, B)
    check_plan(plan, topology)
    assert plan.predicted_s >= lower_bound_s(topology, B) * (1 - 1e-12)
    assert plan.predicted_s <= best_single_tree(topology, B)[1] * (1 + 1e-12)
    star = best_star(topology, B)
    if star is not None:
        assert plan.predicted_s <= star[1] * (1 + 1e-12)
    for pairs in (pack_trees(topology), fapt_policy(topology, B)):
        assert abs(sum(s for _, s in pairs) - 1) <= 1e-9 and min(s for _, s in pairs) > 0
        for t, _ in pairs:
            t.validate(topology.dcs)
            assert all(up is None or topology.link(dc, up) for dc, up in t.parent.items())
    packing = pack_trees_detail(topology)     # its bound holds for every shared-tree policy
    assert packing.z_lower <= packing.z * (1 + 1e-9)
    if not any(t.split for t in plan.policy.trees):
        assert 8 * B * packing.z_lower / 1e6 <= max(plan.link_loads.values()) * (1 + 1e-9)


@pytest.mark.parametrize("name", ["small", "hetero6", "paper9"])
def test_builtin_topologies_against_bound_and_star(name, capsys):
    topology = BUILTIN[name]
    plan = compute_policy(topology, B)
    check_plan(plan, topology)
    bound = cut_lower_bound(topology, B)[0]
    single = best_single_tree(topology, B)[1]
    star = best_star(topology, B)
    ratio = plan.predicted_s / bound
    with capsys.disabled():
        print(f"\n{name}: {plan.method}, {len(plan.policy.trees)} trees, predicted "
              f"{plan.predicted_s:.3f}s, cut bound {bound:.3f}s, ratio {ratio:.3f}, best "
              f"single tree {single:.3f}s, star {f'{star[1]:.3f}s' if star else 'none'}")
    assert 1 <= ratio <= 2.5
    assert plan.predicted_s <= single * (1 + 1e-12)
    if star is not None:
        assert plan.predicted_s <= star[1] * (1 + 1e-12)
    assert plan.predicted_s < single or name == "small"


def test_full_mesh_builtins_improve_on_the_star_by_a_margin():
    for name in ("small", "hetero6"):
        plan = compute_policy(BUILTIN[name], B)
        assert plan.predicted_s <= 0.75 * best_star(BUILTIN[name], B)[1]


def test_max_trees_is_respected():
    topology = BUILTIN["hetero6"]
    for cap in (1, 2, 3):
        plan = compute_policy(topology, B, max_trees=cap)
        check_plan(plan, topology)
        assert len(plan.policy.trees) <= cap
        assert len(pack_trees(topology, max_trees=cap)) <= cap
    one = compute_policy(topology, B, max_trees=1)     # a split tree beats every shared one
    assert one.policy.trees[0].split
    assert one.predicted_s < best_single_tree(topology, B)[1] * 0.6


def test_policy_fields_and_two_dcs():
    two = topo(["p", "q"], ("p", "q", 10, 30))
    plan = compute_policy(two, B, version=7, start_round=40)
    assert (plan.policy.version, plan.policy.start_round) == (7, 40)
    assert plan.shares == (1.0,)
    assert plan.predicted_s == pytest.approx(8 * B / 10e6 + 8 * DEFAULT_CHUNK_BYTES / 1e6
                                             * (1 / 10 + 1 / 30))


def test_digraph_input_ignores_one_way_links():
    g = BUILTIN["small"].graph()
    g.add_node("dc3")
    g.add_edge("dc3", "dc0", mbps=1000.0)              # only one way: unusable
    with pytest.raises(ValueError, match="do not connect"):
        compute_policy(g, B)
    g.add_edge("dc1", "dc3", mbps=5.0)
    g.add_edge("dc3", "dc1", mbps=5.0)
    plan = compute_policy(g, B)
    for t in plan.policy.trees:                          # dc3's one usable link: to dc1
        t.validate(["dc0", "dc1", "dc2", "dc3"])
        near = {c for c, p in t.parent.items() if p == "dc3"} | {t.parent["dc3"]}
        assert near - {None} == {"dc1"}


# --- scale -----------------------------------------------------------------------------------

def test_64_dc_full_mesh_is_fast():
    topology = random_full_mesh(64, 5)
    start = time.process_time()     # this process's CPU, not the machine's load
    plan = compute_policy(topology, B)
    cpu_s = time.process_time() - start
    print(f"\n64-DC full mesh: {cpu_s:.3f} CPU-s, {plan.method}, "
          f"{len(plan.policy.trees)} trees, predicted {plan.predicted_s:.3f}s")
    assert cpu_s < 5.0          # ~0.5 s measured: a bound on the work, not a speed claim
    assert len(plan.policy.trees) <= MAX_POLICY_TREES
    assert plan.predicted_s < best_single_tree(topology, B)[1]
    assert plan.method == "two-level"
    assert time_policy(8, 1) < 5.0
