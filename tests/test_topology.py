"""netstorm.scheduler.topology: the Topology model and the cut lower bound."""
import itertools

import networkx as nx
import pytest

from netstorm.scheduler.topology import Link, Topology, TopologyError, cut_lower_bound, cut_lower_bound_s
from netstorm.wan.builtin import BUILTINS, full_mesh, load_topology

MB10 = 10_000_000


def topo(dcs, *links, name="t"):
    """links: (a, b, mbps) or (a, b, mbps_ab, mbps_ba)."""
    return Topology(name, tuple(dcs), tuple(Link(l[0], l[1], l[2], l[-1]) for l in links))


def naive_bound(t: Topology, model_bytes):
    """Plain-Python reference: every S, both directions summed by hand."""
    best = 0.0
    for size in range(1, len(t.dcs)):
        for side in itertools.combinations(t.dcs, size):
            side = set(side)
            out = sum(t.rate(a, b) for a in side for b in t.dcs if b not in side)
            into = sum(t.rate(b, a) for a in side for b in t.dcs if b not in side)
            best = max(best, model_bytes * 8 / (1e6 * min(out, into)))
    return best


# --- cut lower bound: hand-checked -----------------------------------------------------------

def test_two_dcs_one_link():
    t = topo(["a", "b"], ("a", "b", 10))
    assert cut_lower_bound(t, MB10) == (8.0, frozenset({"a"}))
    assert cut_lower_bound_s(t, MB10) == 8.0


def test_line_of_three():
    # a -20- b -10- c. Cuts: {a}|{b,c}: 20 each way; {c}|{a,b}: 10; {b}|{a,c}: 30.
    # Bottleneck {c}: 10 MB * 8 / 10 Mbit/s = 8 s. The smaller side is returned.
    t = topo(["a", "b", "c"], ("a", "b", 20), ("b", "c", 10))
    assert cut_lower_bound(t, MB10) == (8.0, frozenset({"c"}))
    # rates 10 then 20: {a} decides, same 8 s
    t = topo(["a", "b", "c"], ("a", "b", 10), ("b", "c", 20))
    assert cut_lower_bound(t, MB10) == (8.0, frozenset({"a"}))


def test_full_mesh_of_three():
    # every single-DC cut: 2 links x 40 = 80 Mbit/s each way -> 80 Mbit / 80 = 1 s
    seconds, side = cut_lower_bound(full_mesh("m", ["x", "y", "z"], 40), MB10)
    assert seconds == pytest.approx(1.0)
    assert side == frozenset({"x"})               # ties: the first cut enumerated


def test_asymmetric_link_slower_direction_decides():
    t = topo(["a", "b"], ("a", "b", 100, 10))
    assert cut_lower_bound(t, MB10) == (8.0, frozenset({"a"}))
    # a -(50 a->b, 5 b->a)- b -20- c: {a}: min(50, 5) = 5; {c}: 20; {b}: min(25, 70) = 25
    t = topo(["a", "b", "c"], ("a", "b", 50, 5), ("b", "c", 20))
    assert cut_lower_bound(t, MB10) == (16.0, frozenset({"a"}))


def test_bottleneck_between_two_groups():
    # two well-connected pairs joined by 10 + 5: the 2|2 cut (15 Mbit/s) decides
    t = topo(["a", "b", "c", "d"], ("a", "b", 100), ("c", "d", 100), ("b", "c", 10),
             ("a", "d", 5))
    seconds, side = cut_lower_bound(t, MB10)
    assert seconds == pytest.approx(80 / 15)
    assert side == frozenset({"a", "b"})


@pytest.mark.parametrize("name", BUILTINS)
def test_bound_matches_naive_enumeration(name):
    t = load_topology(name)
    seconds, side = cut_lower_bound(t, 123_456_789)
    assert seconds == pytest.approx(naive_bound(t, 123_456_789), rel=1e-12)
    out = sum(t.rate(a, b) for a in side for b in t.dcs if b not in side)
    into = sum(t.rate(b, a) for a in side for b in t.dcs if b not in side)
    assert seconds == pytest.approx(123_456_789 * 8 / (1e6 * min(out, into)))
    assert len(side) * 2 <= len(t.dcs)


def test_ring_and_size_limit():
    ring = topo([f"d{i}" for i in range(12)], *[(f"d{i}", f"d{(i + 1) % 12}", 10)
                                                  for i in range(12)])
    assert cut_lower_bound_s(ring, MB10) == pytest.approx(4.0)    # any cut crosses 2 links
    big = full_mesh("big", [f"d{i}" for i in range(23)], 1)
    with pytest.raises(TopologyError, match="limited to 22 DCs"):
        cut_lower_bound(big, MB10)
    with pytest.raises(TopologyError, match="model_bytes must be > 0"):
        cut_lower_bound(ring, 0)


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


def test_direct_construction_is_validated():
    with pytest.raises(TopologyError, match="disconnected"):
        topo(["a", "b", "c"], ("a", "b", 1))
    with pytest.raises(TopologyError, match="mbps_ba must be > 0"):
        topo(["a", "b"], ("a", "b", 1, 0))
