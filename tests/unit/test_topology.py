"""netstorm.scheduler.topology: the Topology model (the cut lower bound is tested in
test_planning_cut_bound.py)."""
import networkx as nx
import pytest

from netstorm.scheduler.topology import Link, Topology, TopologyError
from netstorm.wan.builtin import full_mesh


def topo(dcs, *links, name="t"):
    """links: (a, b, mbps) or (a, b, mbps_ab, mbps_ba)."""
    return Topology(name, tuple(dcs), tuple(Link(l[0], l[1], l[2], l[-1]) for l in links))


# --- the Topology class ----------------------------------------------------------------------

def test_topology_methods():
    t = topo(["a", "b", "c"], ("a", "b", 10, 20), ("b", "c", 30))
    g = t.graph()
    assert isinstance(g, nx.DiGraph)
    assert g["a"]["b"]["mbps"] == 10 and g["b"]["a"]["mbps"] == 20 and g["c"]["b"]["mbps"] == 30
    assert g.number_of_edges() == 4 and set(g.nodes) == {"a", "b", "c"}
    assert not t.is_full_mesh and full_mesh("m", "xyz", 1).is_full_mesh
    assert t.rate("a", "b") == 10 and t.rate("b", "a") == 20 and t.rate("a", "c") == 0.0
    assert t.neighbors("b") == ("a", "c") and t.neighbors("a") == ("b",)
    s = t.scaled(0.5)
    assert s.rate("a", "b") == 5 and s.rate("b", "a") == 10 and s.dcs == t.dcs
    assert t.with_rates({("b", "a"): 7}).rate("b", "a") == 7
    assert t.rates() == {("a", "b"): 10, ("b", "a"): 20, ("b", "c"): 30, ("c", "b"): 30}
    with pytest.raises(TopologyError, match="no DC named 'z'"):
        t.rate("a", "z")
    with pytest.raises(TopologyError, match="scale factor must be > 0"):
        t.scaled(0)
    with pytest.raises(TopologyError, match="no link a-c"):
        t.with_rates({("a", "c"): 1})


def test_latency_is_kept_by_every_copy_and_is_in_the_graph():
    t = Topology("t", ("a", "b", "c"), (Link("a", "b", 10, 20, 35.0), Link("b", "c", 30, 30)))
    g = t.graph()
    assert g["a"]["b"]["latency_s"] == g["b"]["a"]["latency_s"] == 0.035
    assert g["b"]["c"]["latency_s"] == 0.0
    assert t.scaled(2).links[0].latency_ms == 35.0
    assert t.with_rates({("a", "b"): 1}).links[0].latency_ms == 35.0
    assert t.without_latency().links[0] == Link("a", "b", 10, 20)
    for bad in (-1.0, float("nan"), 1e5, True):
        with pytest.raises(TopologyError, match="latency_ms must be a number"):
            Topology("t", ("a", "b"), (Link("a", "b", 1, 1, bad),))


def test_direct_construction_is_validated():
    with pytest.raises(TopologyError, match="disconnected"):
        topo(["a", "b", "c"], ("a", "b", 1))
    with pytest.raises(TopologyError, match="mbps_ba must be > 0"):
        topo(["a", "b"], ("a", "b", 1, 0))
