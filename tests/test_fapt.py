"""scheduler.fapt: time model, exact share LP, tree packing, FAPT, compute_policy."""
import math
import time

import networkx as nx
import numpy as np
import pytest

from netstorm.geoserver.tree import Policy, Tree
from netstorm.scheduler import fapt
from netstorm.scheduler.fapt import (PolicyPlan, best_root, best_single_tree, best_star,
                            compute_policy, fapt_policy, fapt_score, fapt_tree, link_loads,
                            optimal_shares, pack_trees, pack_trees_detail, pipeline_fill_s,
                            predict_iteration_s, random_full_mesh, shallow_tree,
                            time_policy)
from netstorm.scheduler.lp import solve_lp
from netstorm.scheduler.topology import Link, Topology, cut_lower_bound
from netstorm.wan import load_topology

B = 46758048                 # resnet18, float32
MIB = 1 << 20


def topo(dcs, *links, name="t"):
    """links: (a, b, mbps) or (a, b, mbps_ab, mbps_ba)."""
    return Topology(name, tuple(dcs), tuple(Link(l[0], l[1], l[2], l[-1]) for l in links))


def tree(root, **parent):
    return Tree(root=root, parent={dc: (None if dc == root else p) for dc, p in
                                   {**parent, root: None}.items()})


def random_partial_mesh(seed: int) -> Topology:
    """A connected networkx G(n, p) graph (components chained together), 4..10 DCs, each
    direction's rate uniform in [10, 150) Mbit/s."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 11))
    g = nx.gnp_random_graph(n, float(rng.uniform(0.25, 0.7)), seed=seed)
    parts = [sorted(c) for c in nx.connected_components(g)]
    for a, b in zip(parts, parts[1:]):
        g.add_edge(a[0], b[-1])
    dcs = tuple(f"dc{i}" for i in range(n))
    return Topology(f"random{seed}", dcs, tuple(
        Link(dcs[a], dcs[b], round(float(rng.uniform(10, 150)), 1),
             round(float(rng.uniform(10, 150)), 1)) for a, b in sorted(g.edges())))


RANDOM = [random_partial_mesh(seed) for seed in range(24)]
BUILTIN = {name: load_topology(name) for name in ("small", "hetero6", "paper9")}


def busiest_s(pairs, topology, model_bytes=B):
    return max(link_loads(pairs, topology, model_bytes).values())


def direct_share_lp(trees, topology):
    """min z s.t. Σ_t s_t a_te / c_e - z <= 0 per direction, Σ s = 1, by the two-phase
    simplex in the textbook form (no fapt internals): the busiest link's factor z."""
    directions = sorted(topology.rates())
    rate = topology.rates()
    rows = []
    for a, b in directions:
        row = [0.0] * (len(trees) + 1)
        for t, tr in enumerate(trees):
            for dc, up in tr.parent.items():
                if up is not None and (a, b) in ((dc, up), (up, dc)):
                    row[t] += 1.0 / rate[(a, b)]
        row[-1] = -1.0
        rows.append(row)
    c = [0.0] * len(trees) + [1.0]
    res = solve_lp(c, A_ub=rows, b_ub=[0.0] * len(rows), A_eq=[[1.0] * len(trees) + [0.0]],
                   b_eq=[1.0])
    return res.x[:-1], res.value


# --- shares for fixed trees ------------------------------------------------------------------

TRIANGLE = topo("abc", ("a", "b", 40), ("a", "c", 10), ("b", "c", 20))
T_AB_AC = tree("a", b="a", c="a")
T_AB_BC = tree("b", a="b", c="b")
T_AC_BC = tree("c", a="c", b="c")


def test_two_trees_sharing_one_link_hand_optimum():
    # Both trees use a-b (40); one also a-c (10), the other b-c (20). Busiest link:
    # max(s1/10, s2/20, 1/40) -> s1/10 = s2/20 -> s = (1/3, 2/3), z = 1/30.
    shares, seconds = optimal_shares([T_AB_AC, T_AB_BC], TRIANGLE, B)
    assert shares == pytest.approx([1 / 3, 2 / 3], abs=1e-9)
    assert seconds == pytest.approx(8 * B / (1e6 * 30), rel=1e-9)
    assert busiest_s(list(zip([T_AB_AC, T_AB_BC], shares)), TRIANGLE) == \
        pytest.approx(seconds, rel=1e-9)


def test_third_tree_does_not_help_and_packing_meets_the_cut_bound():
    # 10z >= s1 + s3 and 20z >= s2 + s3 give 30z >= 1 + s3: the optimum stays 1/30, which
    # is also the cut bound of {c} (30 Mbit/s in and out).
    shares, seconds = optimal_shares([T_AB_AC, T_AB_BC, T_AC_BC], TRIANGLE, B)
    assert seconds == pytest.approx(8 * B / 30e6, rel=1e-9)
    assert shares[2] == pytest.approx(0, abs=1e-9)
    packing = pack_trees_detail(TRIANGLE)
    assert packing.z == pytest.approx(1 / 30, rel=1e-9)
    assert packing.z_lower == pytest.approx(packing.z, rel=1e-9)     # proven optimal
    assert 8 * B * packing.z / 1e6 == pytest.approx(cut_lower_bound(TRIANGLE, B)[0], rel=1e-9)


def random_trees(topology, count, seed):
    """Random spanning trees: MSTs under random weights, rooted at a random DC."""
    rng = np.random.default_rng(seed)
    g = nx.Graph()
    g.add_edges_from((l.a, l.b, {"w": float(rng.random())}) for l in topology.links)
    out = []
    for _ in range(count):
        for _, _, data in g.edges(data=True):
            data["w"] = float(rng.random())
        mst = nx.minimum_spanning_tree(g, weight="w")
        root = topology.dcs[int(rng.integers(len(topology.dcs)))]
        parent = {root: None}
        for a, b in nx.bfs_edges(mst, root):
            parent[b] = a
        out.append(Tree(root, parent))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_share_lp_is_exact_and_never_worse_than_a_single_tree(seed):
    topology = RANDOM[seed]
    trees = random_trees(topology, 2 + seed % 5, seed)
    shares, seconds = optimal_shares(trees, topology, B)
    assert min(shares) >= 0 and sum(shares) == pytest.approx(1, abs=1e-9)
    assert busiest_s(list(zip(trees, shares)), topology) == pytest.approx(seconds, rel=1e-9)
    for t in trees:                                        # any one tree alone
        assert seconds <= busiest_s([(t, 1.0)], topology) * (1 + 1e-9)
    equal = [(t, 1 / len(trees)) for t in trees]
    assert seconds <= busiest_s(equal, topology) * (1 + 1e-9)
    _, z = direct_share_lp(trees, topology)               # the textbook two-phase form
    assert seconds == pytest.approx(8 * B * z / 1e6, rel=1e-8)


def test_incremental_lp_edits_match_a_fresh_solve():
    topology = random_full_mesh(9, 3)
    net = fapt._net(topology)
    rows = fapt._directions(net)
    pool = [fapt._parents(net, t) for t in random_trees(topology, 14, 7)]
    cols = [fapt._column(net, p, rows) for p in pool]

    def fresh(indices):
        lp = fapt._GameLP.build(np.column_stack([cols[i] for i in indices]))
        lp.solve()
        return lp.result()[1]

    lp = fapt._GameLP.build(np.column_stack(cols[:6]))
    lp.solve()
    ids = {i: i for i in range(6)}                       # pool index -> LP id
    for i in range(6, 14):
        ids[i] = lp.add_column(cols[i])
        lp.solve()
        assert lp.result()[1] == pytest.approx(fresh(sorted(ids)), rel=1e-9)
        shares = dict(zip(lp.ids(), lp.result()[0]))
        heaviest = max(ids, key=lambda k: shares[ids[k]])
        lp.remove_column(ids.pop(heaviest))              # forces a basic column out
        lp.solve()
        assert lp.result()[1] == pytest.approx(fresh(sorted(ids)), rel=1e-9)


# --- the time model --------------------------------------------------------------------------

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


def test_time_model_rejects_trees_over_missing_links():
    with pytest.raises(ValueError, match="usable both ways"):
        predict_iteration_s([(tree("dc1", dc2="dc1", dc3="dc2", dc4="dc1", dc5="dc1",
                                   dc6="dc1", dc7="dc1", dc8="dc1", dc9="dc1"), 1.0)],
                            BUILTIN["paper9"], B)


def test_small_prediction_equals_the_hand_optimum():
    # 3 DCs at 40 Mbit/s: the 3 two-edge paths with 1/3 each put 2/3 of the model on every
    # direction; each path is rooted in its middle: one hop up and one down.
    plan = compute_policy(BUILTIN["small"], B)
    expected = 8 * B * (2 / 3) / 40e6 + 2 * 8 * MIB / 40e6
    assert plan.predicted_s == pytest.approx(expected, rel=1e-9)
    assert sorted(plan.shares) == pytest.approx([1 / 3] * 3, abs=1e-9)
    for t in plan.policy.trees:
        assert len(t.children(t.root)) == 2


# --- compute_policy on many graphs -----------------------------------------------------------

def check_plan(plan: PolicyPlan, topology: Topology):
    assert isinstance(plan.policy, Policy)
    assert len(plan.shares) == len(plan.policy.trees) <= len(topology.dcs)
    assert min(plan.shares) > 0 and abs(sum(plan.shares) - 1) <= 1e-9
    assert plan.policy.shares == pytest.approx(plan.shares, abs=1e-12)
    for t in plan.policy.trees:
        t.validate(topology.dcs)
        for dc, up in t.parent.items():
            if up is not None:
                assert topology.link(dc, up) is not None, f"{dc}-{up} is not a link"
    assert plan.predicted_s == pytest.approx(predict_iteration_s(plan, topology, B), rel=1e-12)
    assert plan.link_loads == pytest.approx(link_loads(plan, topology, B), rel=1e-12)
    assert Policy.from_json(plan.policy.to_json(), topology.dcs) == plan.policy


@pytest.mark.parametrize("topology", RANDOM, ids=lambda t: t.name)
def test_random_partial_meshes(topology):
    plan = compute_policy(topology, B)
    check_plan(plan, topology)
    assert plan.predicted_s >= cut_lower_bound(topology, B)[0] * (1 - 1e-12)
    assert plan.predicted_s <= best_single_tree(topology, B)[1] * (1 + 1e-12)
    star = best_star(topology, B)
    if star is not None:
        assert plan.predicted_s <= star[1] * (1 + 1e-12)
    for pairs in (pack_trees(topology), fapt_policy(topology, B)):
        assert abs(sum(s for _, s in pairs) - 1) <= 1e-9 and min(s for _, s in pairs) > 0
        for t, _ in pairs:
            t.validate(topology.dcs)
            assert all(up is None or topology.link(dc, up) for dc, up in t.parent.items())
    packing = pack_trees_detail(topology)               # its bound holds for every policy
    assert packing.z_lower <= packing.z * (1 + 1e-9)
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
    one = compute_policy(topology, B, max_trees=1)
    assert one.predicted_s == pytest.approx(best_single_tree(topology, B)[1], rel=1e-9)


def test_policy_fields_and_two_dcs():
    two = topo(["p", "q"], ("p", "q", 10, 30))
    plan = compute_policy(two, B, version=7, start_round=40)
    assert (plan.policy.version, plan.policy.start_round) == (7, 40)
    assert plan.shares == (1.0,)
    assert plan.predicted_s == pytest.approx(8 * B / 10e6 + 8 * MIB / 1e6 * (1 / 10 + 1 / 30))


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


# --- roots, FAPT, shallow trees --------------------------------------------------------------

def test_best_root_is_the_centre_and_ties_go_to_the_lower_index():
    line5 = topo("abcde", ("a", "b", 50), ("b", "c", 50), ("c", "d", 50), ("d", "e", 50))
    assert best_root(tree("a", b="a", c="b", d="c", e="d"), line5).root == "c"
    line4 = topo("abcd", ("a", "b", 50), ("b", "c", 50), ("c", "d", 50))
    rooted = best_root(tree("d", c="d", b="c", a="b"), line4)
    assert rooted.root == "b" and rooted.parent == {"a": "b", "b": None, "c": "b", "d": "c"}
    slow_end = topo("abcd", ("a", "b", 5), ("b", "c", 50), ("c", "d", 50))
    assert best_root(tree("d", c="d", b="c", a="b"), slow_end).root == "b"


def test_fapt_tree_takes_the_widest_path_not_the_shortest():
    # a -> r directly is 1 hop at 10 Mbit/s; a -> b -> r is 2 hops at 100.
    g = topo("rab", ("r", "a", 10), ("r", "b", 100), ("b", "a", 100))
    assert fapt_tree(g, "r").parent == {"r": None, "a": "b", "b": "r"}
    assert shallow_tree(g, "r").parent == {"r": None, "a": "r", "b": "r"}
    # the slower direction counts: a -> b is fast but b -> a is not
    g2 = topo("rab", ("r", "a", 10), ("r", "b", 100), ("b", "a", 5, 100))
    assert fapt_tree(g2, "r").parent["a"] == "r"


def test_fapt_score_by_hand():
    line = topo("xyz", ("x", "y", 50), ("y", "z", 100))
    assert fapt_score("y", line) == pytest.approx(50)               # one level, slowest 50
    assert fapt_score("x", line) == pytest.approx(1 / (1 / 50 + 1 / 100))
    assert fapt_score("z", line) == pytest.approx(1 / (1 / 100 + 1 / 50))
    assert fapt_score("y", line) > fapt_score("x", line) == pytest.approx(fapt_score("z", line))
    assert fapt_score(tree("x", y="x", z="x"), topo("xyz", ("x", "y", 50), ("x", "z", 20),
                                                    ("y", "z", 100))) == pytest.approx(20)


@pytest.mark.parametrize("topology", RANDOM[:12] + [random_full_mesh(12, 1)],
                         ids=lambda t: t.name)
def test_fapt_heap_and_array_dijkstra_agree(topology):
    net = fapt._net(topology)
    heap = fapt._fapt_all(net, dense=False)
    dense = fapt._fapt_all(net, dense=True)
    assert all((a == b).all() for a, b in zip(heap, dense))
    width = np.minimum(net.cap, net.cap.T)
    g = nx.Graph()
    g.add_weighted_edges_from((i, j, width[i, j]) for i, j in net.edges)
    widest = nx.maximum_spanning_tree(g)                 # holds a widest path of every pair
    for root, parent in enumerate(heap):
        for v in range(len(parent)):
            path_width, node = math.inf, v
            while parent[node] >= 0:
                path_width = min(path_width, width[node, parent[node]])
                node = parent[node]
            assert node == root
            if v != root:
                path = nx.shortest_path(widest, v, root)
                assert path_width == min(width[p, q] for p, q in zip(path, path[1:]))


def test_fapt_policy_uses_lp_shares():
    topology = BUILTIN["small"]
    pairs = fapt_policy(topology, B)
    assert sorted(s for _, s in pairs) == pytest.approx([1 / 3] * 3, abs=1e-9)
    assert {t.root for t, _ in pairs} == set(topology.dcs)


# --- scale -----------------------------------------------------------------------------------

def test_64_dc_full_mesh_is_fast():
    topology = random_full_mesh(64, 5)
    start = time.perf_counter()
    plan = compute_policy(topology, B)
    elapsed = time.perf_counter() - start
    print(f"\n64-DC full mesh: {elapsed:.3f}s wall, {plan.method}, "
          f"{len(plan.policy.trees)} trees, predicted {plan.predicted_s:.3f}s")
    assert elapsed < 5.0          # ~0.5 s measured; generous for a loaded machine
    assert len(plan.policy.trees) <= 64
    assert plan.predicted_s < best_single_tree(topology, B)[1]
    assert time_policy(8, 1) < 5.0
