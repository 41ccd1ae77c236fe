"""netstorm.scheduler.planning.arborescence: Chu-Liu/Edmonds against networkx's."""
import networkx as nx
import numpy as np
import pytest

from netstorm.scheduler.planning.arborescence import (min_in_arborescence,
                                                      min_out_arborescence, tree_cost)


def reaches(parent, root):
    for v in range(len(parent)):
        seen, x = set(), v
        while x != root:
            assert x not in seen and x >= 0, f"{v} does not reach the root"
            seen.add(x)
            x = int(parent[x])
    return True


@pytest.mark.parametrize("seed", range(40))
def test_the_cheapest_out_arborescence_costs_what_networkx_finds(seed):
    """Random costs with ties and missing edges (inf), 2-9 DCs: the same least cost as
    networkx's Edmonds, a valid arborescence from the root, or ValueError exactly when
    some DC cannot be reached."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 10))
    cost = rng.integers(0, 6, size=(n, n)).astype(float)   # small integers: many ties
    cost[rng.random((n, n)) < 0.3] = np.inf
    root = int(rng.integers(n))
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_weighted_edges_from((u, v, cost[u, v]) for u in range(n) for v in range(n)
                                  if u != v and v != root and np.isfinite(cost[u, v]))
    if len(nx.descendants(graph, root)) < n - 1:
        with pytest.raises(ValueError, match="cannot be reached from DC"):
            min_out_arborescence(cost, root)
        return
    want = nx.minimum_spanning_arborescence(graph).size(weight="weight")
    parent = min_out_arborescence(cost, root)
    assert parent[root] == -1 and reaches(parent, root)
    assert tree_cost(cost, parent, inward=False) == pytest.approx(want)


def test_an_in_arborescence_is_the_out_arborescence_of_the_reversed_graph():
    # 0 <- 1 is cheap, 1 <- 2 cheap, 2 -> 0 dear: into 0, 2 goes through 1
    cost = np.full((3, 3), np.inf)
    cost[1, 0], cost[2, 1], cost[2, 0], cost[0, 1], cost[0, 2] = 1, 1, 5, 9, 9
    up = min_in_arborescence(cost, 0)
    assert list(up) == [-1, 0, 1] and tree_cost(cost, up, inward=True) == 2
    down = min_out_arborescence(cost, 0)
    assert list(down) == [-1, 2, 0] and tree_cost(cost, down, inward=False) == 10


def test_a_cycle_of_cheapest_edges_is_opened_where_it_is_cheapest_to_enter():
    # 1 <-> 2 is a cheap cycle; entering it at 1 costs 10 - 1, at 2 costs 4 - 1
    cost = np.full((3, 3), np.inf)
    cost[1, 2], cost[2, 1], cost[0, 1], cost[0, 2] = 1, 1, 10, 4
    assert list(min_out_arborescence(cost, 0)) == [-1, 2, 0]
