"""netstorm.wan.builtin: the built-in topologies and their shipped files."""
import networkx as nx
import pytest

from netstorm.wan.builtin import (BUILTINS, GENERATORS, PAPER9_EDGES, builtin_file_text,
                                  load_topology, topology_path)


# --- built-ins -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_files_equal_generators(name):
    assert topology_path(name).read_text() == builtin_file_text(name)
    assert load_topology(name) == GENERATORS[name]()
    assert GENERATORS[name]() == GENERATORS[name]()      # deterministic


def test_small():
    t = load_topology("small")
    assert t.dcs == ("dc0", "dc1", "dc2") and t.is_full_mesh
    assert all(l.mbps_ab == l.mbps_ba == 40.0 for l in t.links)


def test_hetero6():
    t = load_topology("hetero6")
    assert t.dcs == tuple(f"dc{i}" for i in range(6)) and t.is_full_mesh and len(t.links) == 15
    rates = list(t.rates().values())
    assert all(10 <= r <= 100 and r == round(r, 1) for r in rates)
    assert len(set(rates)) > 20                      # per-direction draws, not constant
    assert any(l.mbps_ab != l.mbps_ba for l in t.links)


def test_paper9():
    t = load_topology("paper9")
    assert t.dcs == tuple(f"dc{i}" for i in range(1, 10))
    assert len(t.links) == 13 and not t.is_full_mesh
    assert nx.is_strongly_connected(t.graph())
    assert {frozenset((l.a, l.b)) for l in t.links} == \
        {frozenset((f"dc{a}", f"dc{b}")) for a, b in PAPER9_EDGES}
    assert all(20 <= l.mbps_ab == l.mbps_ba <= 155 and l.mbps_ab == round(l.mbps_ab, 1)
               for l in t.links)
    assert all(20 <= l.latency_ms < 100 and l.latency_ms == int(l.latency_ms) for l in t.links)
    assert len({l.latency_ms for l in t.links}) > 5
