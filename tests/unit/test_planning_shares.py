"""netstorm.scheduler.planning.shares: the exact share LP for fixed trees (and its lazy
tableau, GameLP)."""
import networkx as nx
import numpy as np
import pytest

from netstorm.bench.planning import random_full_mesh
from netstorm.geoserver.policy.tree import Tree
from netstorm.scheduler.planning import (cut_lower_bound, link_loads, optimal_shares,
                                         pack_trees_detail, solve_lp)
from netstorm.scheduler.planning.network import as_net, parent_array
from netstorm.scheduler.planning.shares import GameLP, column, directions
from planning_cases import RANDOM, B, topo, tree


def busiest_s(pairs, topology, model_bytes=B):
    return max(link_loads(pairs, topology, model_bytes).values())


def direct_share_lp(trees, topology):
    """min z s.t. Σ_t s_t a_te / c_e - z <= 0 per direction, Σ s = 1, by the two-phase
    simplex in the textbook form (no share-LP internals): the busiest link's factor z."""
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
    net = as_net(topology)
    rows = directions(net)
    pool = [parent_array(net, t) for t in random_trees(topology, 14, 7)]
    cols = [column(net, p, rows) for p in pool]

    def fresh(indices):
        lp = GameLP.build(np.column_stack([cols[i] for i in indices]))
        lp.solve()
        return lp.result()[1]

    lp = GameLP.build(np.column_stack(cols[:6]))
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
