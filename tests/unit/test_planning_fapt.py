"""netstorm.scheduler.planning.fapt (and shallow trees): widest-path trees, the FAPT
score, FAPT with LP shares."""
import math

import networkx as nx
import numpy as np
import pytest

from netstorm.bench.planning import random_full_mesh
from netstorm.scheduler.planning import fapt_policy, fapt_score, fapt_tree, shallow_tree
from netstorm.scheduler.planning.fapt import fapt_all
from netstorm.scheduler.planning.network import as_net
from planning_cases import BUILTIN, RANDOM, B, topo, tree


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
    net = as_net(topology)
    heap = fapt_all(net, dense=False)
    dense = fapt_all(net, dense=True)
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
