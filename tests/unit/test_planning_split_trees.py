"""netstorm.scheduler.planning.split_trees: pricing pairs of arborescences, column
generation over split trees, and compute_policy's use of them."""
import itertools

import numpy as np
import pytest

from netstorm.bench.planning import random_full_mesh
from netstorm.scheduler.planning import compute_policy, cut_lower_bound_s, pack_trees_detail
from netstorm.scheduler.planning.network import Split, as_net
from netstorm.scheduler.planning.shares import column, directions
from netstorm.scheduler.planning.split_trees import (SPLIT_MAX_DCS, price_split,
                                                     split_packing)
from netstorm.scheduler.planning.time_model import predict
from planning_cases import BUILTIN, B, topo


def arborescences(n, root):
    """Every parent array of an in-arborescence into ``root`` (the same arrays read as
    out-arborescences from it), brute force."""
    others = [v for v in range(n) if v != root]
    for choice in itertools.product(range(n), repeat=len(others)):
        parent = np.full(n, -1, dtype=np.int64)
        parent[others] = choice
        if any(parent[v] == v for v in others):
            continue
        ok = True
        for v in others:
            seen, x = set(), v
            while x != root and ok:
                ok = x not in seen
                seen.add(x)
                x = int(parent[x])
        if ok:
            yield parent


@pytest.mark.parametrize("seed", range(6))
def test_the_priced_tree_is_the_cheapest_pair_over_every_root(seed):
    """4 DCs, random direction rates and duals: price_split's value is the least
    u·column over every (in-arborescence, out-arborescence) pair with a common root, and
    its tree has that value."""
    rng = np.random.default_rng(seed)
    dcs = [f"d{i}" for i in range(4)]
    links = [(a, b, float(rng.uniform(10, 100)), float(rng.uniform(10, 100)))
             for a, b in itertools.combinations(dcs, 2)]
    net = as_net(topo(dcs, *links))
    rows = directions(net)
    duals = rng.uniform(0, 1, rows.size) * (rng.random(rows.size) < 0.6)
    tree, value = price_split(net, rows, duals)
    assert duals @ column(net, tree, rows) == pytest.approx(value, abs=1e-12)
    best = min(duals @ column(net, Split(up, down), rows)
               for root in range(4) for up in arborescences(4, root)
               for down in arborescences(4, root))
    assert value == pytest.approx(best, abs=1e-12)


def test_split_trees_reach_a_busiest_link_no_shared_trees_can():
    """hetero6's links are asymmetric: the best packing of any number of shared trees
    puts 1.48x the cut bound on its busiest link; split trees come within 5% of it."""
    topology = BUILTIN["hetero6"]
    net = as_net(topology)
    bound = cut_lower_bound_s(topology, B)
    shared = pack_trees_detail(topology, max_trees=255)
    shared_busy = 8 * B * shared.z / 1e6
    start = [np.array([-1, 0, 0, 0, 0, 0])]            # a star at dc0 (a full mesh)
    trees, shares = split_packing(net, start, 255, rounds=200)
    busy = predict(net, trees, shares, B, 1 << 20)[1].max()
    assert shared_busy > 1.4 * bound
    assert bound * (1 - 1e-9) <= busy <= 1.05 * bound
    assert any(isinstance(t, Split) for t in trees)


def test_compute_policy_keeps_split_trees_when_the_model_says_they_are_faster():
    hetero6 = compute_policy(BUILTIN["hetero6"], B)
    assert hetero6.method == "split" and any(t.split for t in hetero6.policy.trees)
    assert hetero6.predicted_s < min(v for k, v in hetero6.candidates_s.items()
                                     if k != "split")
    paper9 = compute_policy(BUILTIN["paper9"], B)       # busiest link at the bound already
    assert paper9.candidates_s["split"] == pytest.approx(paper9.predicted_s)


def test_large_meshes_get_split_trees_of_depth_two_only():
    """Above SPLIT_MAX_DCS the column generation does not run; split trees come from the
    two-level candidate, every DC at most two hops from the root each way."""
    plan = compute_policy(random_full_mesh(SPLIT_MAX_DCS + 1, 1), B)
    assert "split" not in plan.candidates_s and "two-level" in plan.candidates_s
    for tree in plan.policy.trees:
        for parent in (tree.parent, tree.down_parent):
            assert all(p is None or parent[p] is None or parent[parent[p]] is None
                       for p in parent.values())
