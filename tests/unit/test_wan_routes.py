"""netstorm.wan.routes: the emulated WAN's IP routes."""
import networkx as nx
import pytest

from netstorm.scheduler.topology import Link, Topology
from netstorm.wan.builtin import BUILTINS, load_topology
from netstorm.wan.routes import next_hops, path_delays_ms, shortest_paths


def topo(dcs, *links, name="t"):
    """links: (a, b, mbps) or (a, b, mbps_ab, mbps_ba)."""
    return Topology(name, tuple(dcs), tuple(Link(l[0], l[1], l[2], l[-1]) for l in links))


# --- routing ---------------------------------------------------------------------------------

def test_shortest_paths_line_and_ties():
    line = topo(["a", "b", "c"], ("a", "b", 1), ("b", "c", 1))
    assert shortest_paths(line)[("a", "c")] == ("a", "b", "c")
    assert next_hops(line)[("c", "a")] == "b"
    # 4-cycle a-b-c-d-a: a->c has two 2-hop paths; the one over earlier links (via b) wins
    cycle = topo("abcd", ("a", "b", 1), ("b", "c", 1), ("c", "d", 1), ("d", "a", 1))
    paths = shortest_paths(cycle)
    assert paths[("a", "c")] == ("a", "b", "c") and paths[("c", "a")] == ("c", "b", "a")
    # b->d: via a uses links 0 and 3, via c links 1 and 2: the latest link (2 < 3) decides
    assert paths[("b", "d")] == ("b", "c", "d") and paths[("d", "b")] == ("d", "c", "b")


def test_path_delays_add_up_along_the_routes():
    line = Topology("l", ("a", "b", "c"), (Link("a", "b", 1, 1, 20.0), Link("b", "c", 1, 1, 35.0)))
    delays = path_delays_ms(line)
    assert delays[("a", "b")] == 20.0 and delays[("c", "a")] == delays[("a", "c")] == 55.0
    paper9 = load_topology("paper9")
    paths = shortest_paths(paper9)
    for pair, ms in path_delays_ms(paper9).items():
        hops = len(paths[pair]) - 1
        assert 20 * hops <= ms <= 100 * hops


@pytest.mark.parametrize("name", BUILTINS)
def test_shortest_paths_are_hop_minimal_symmetric_and_forwardable(name):
    t = load_topology(name)
    paths = shortest_paths(t)
    g = nx.Graph(t.graph())
    assert len(paths) == len(t.dcs) * (len(t.dcs) - 1)
    for (a, b), path in paths.items():
        assert path[0] == a and path[-1] == b
        assert len(path) - 1 == nx.shortest_path_length(g, a, b)
        assert all(g.has_edge(x, y) for x, y in zip(path, path[1:]))
        assert paths[(b, a)] == path[::-1]
        for i in range(1, len(path) - 1):               # destination-based forwarding
            assert paths[(path[i], b)] == path[i:]
    if t.is_full_mesh:
        assert all(len(p) == 2 for p in paths.values())
