import itertools
import math

import networkx as nx
import pytest

from scheduler.topology import (BUILTINS, GENERATORS, PAPER9_EDGES, Link, Topology,
                                TopologyError, builtin_file_text, cut_lower_bound,
                                cut_lower_bound_s, fluctuating_trace, full_mesh,
                                load_topology, load_trace, mean_rates, next_hops,
                                parse_topology, rates_at, shortest_paths, to_toml,
                                topology_path)

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


# --- files -----------------------------------------------------------------------------------

GOOD = """
name = "tri"
dcs = ["eu", "us", "asia"]
[[link]]
a = "eu"
b = "us"
mbps = 40
[[link]]
a = "us"
b = "asia"
mbps_ab = 20
mbps_ba = 12.5
"""


def test_good_file_parses_and_round_trips(tmp_path):
    path = tmp_path / "tri.toml"
    path.write_text(GOOD)
    t = load_topology(path)
    assert t.name == "tri" and t.dcs == ("eu", "us", "asia")
    assert t.links == (Link("eu", "us", 40.0, 40.0), Link("us", "asia", 20.0, 12.5))
    assert t.source == str(path)
    again = tmp_path / "again.toml"
    again.write_text(to_toml(t))
    assert load_topology(again) == t


def bad(body: str):
    return f'name = "bad"\n{body}'


LINK_AB = '[[link]]\na = "a"\nb = "b"\n'

REJECTIONS = [
    (bad('dcs = ["a", "b"]\n[[link]]\na = "a"\nb = "zz"\nmbps = 1\n'), "unknown DC 'zz'"),
    (bad('dcs = ["a", "b", "a"]\n' + LINK_AB + "mbps = 1\n"), "duplicate DC 'a'"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 1\n" + '[[link]]\na = "b"\nb = "a"\nmbps = 2\n'),
     "link #2 (b-a): duplicate link between b and a"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 1\n" + '[[link]]\na = "a"\nb = "a"\nmbps = 2\n'),
     "link #2 (a-a): self-loop"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 0\n"), "mbps must be > 0 Mbit/s, got 0"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = -5.5\n"), "mbps must be > 0 Mbit/s, got -5.5"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps_ab = 3\nmbps_ba = -1\n"),
     "mbps_ba must be > 0"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = inf\n"), "mbps must be > 0 Mbit/s, got inf"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + 'mbps = "fast"\n'),
     "mbps must be a number (Mbit/s), got 'fast'"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = true\n"), "mbps must be a number"),
    (bad('dcs = ["a", "b", "c"]\n' + LINK_AB + "mbps = 1\n"),
     "disconnected: the DCs fall into 2 groups with no link between them: [['a', 'b'], ['c']]"),
    (bad('dcs = ["a"]\n'), "at least 2 DCs, got 1"),
    (bad("dcs = []\n"), "at least 2 DCs, got 0"),
    ('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 1\n", "missing field 'name'"),
    (bad(LINK_AB + "mbps = 1\n"), "missing field 'dcs'"),
    (bad('dcs = ["a", "b"]\n'), "missing [[link]] tables"),
    (bad('dcs = ["a", "b"]\n[[link]]\na = "a"\nmbps = 1\n'), "link #1: missing field 'b'"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB), "link #1 (a-b): missing field 'mbps'"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps_ab = 3\n"), "missing field 'mbps_ba'"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 3\nmbps_ab = 3\n"), "not both"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 3\nrate = 3\n"), "unknown field(s) ['rate']"),
    (bad('dcs = "a b"\n' + LINK_AB + "mbps = 1\n"), "dcs must be a list of DC names"),
    (bad('dcs = ["a", "b c"]\n' + LINK_AB + "mbps = 1\n"), "DC name 'b c' must be"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 1\nlinks = 2\n"), "unknown field(s) ['links']"),
    (bad("dcs = [\n"), "not valid TOML"),
]


@pytest.mark.parametrize("text,message", REJECTIONS, ids=[m for _, m in REJECTIONS])
def test_rejections_name_file_and_problem(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(TopologyError, match="cannot read topology file .*nope.toml"):
        load_topology(tmp_path / "nope.toml")
    with pytest.raises(TopologyError, match="built-in topologies: small, hetero6, paper9"):
        load_topology("tiny")


def test_parse_topology_names_source():
    with pytest.raises(TopologyError, match=r"^mine: missing field 'name'"):
        parse_topology({"dcs": ["a", "b"]}, source="mine")


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


# --- traces ----------------------------------------------------------------------------------

def test_fluctuating_trace_is_deterministic():
    t = load_topology("small")
    one = fluctuating_trace(t, 10, 35, 5, 50, seed=1)
    assert one == fluctuating_trace(t, 10, 35, 5, 50, seed=1)
    assert one != fluctuating_trace(t, 10, 35, 5, 50, seed=2)
    assert [ts for ts, _ in one] == [0, 10, 20, 30]
    for _, rates in one:
        assert set(rates) == set(t.rates())
        assert all(5 <= r <= 50 and r == round(r, 1) for r in rates.values())
    sym = fluctuating_trace(t, 10, 35, 5, 50, seed=1, symmetric=True)
    assert all(r[(a, b)] == r[(b, a)] for _, r in sym for a, b in r)
    with pytest.raises(TopologyError, match="period_s > 0"):
        fluctuating_trace(t, 0, 35, 5, 50, seed=1)


def test_paper9_fluctuating():
    trace = load_trace("paper9-fluctuating", period_s=180, duration_s=3600)
    assert len(trace) == 20 and trace[1][0] == 180
    assert trace == load_trace("paper9-fluctuating", period_s=180, duration_s=3600)
    assert all(len(r) == 26 and all(20 <= v <= 155 for v in r.values()) for _, r in trace)
    assert len(load_trace("paper9-fluctuating")) == 20           # default period 180 s
    with pytest.raises(TopologyError, match="unknown trace 'x'"):
        load_trace("x")


def test_mean_rates_hand_checked():
    ab, ba = ("a", "b"), ("b", "a")
    trace = [(0, {ab: 10, ba: 20}), (30, {ab: 40}), (60, {ab: 1000})]
    mean = mean_rates(trace, 60)
    assert mean.rate("a", "b") == pytest.approx(25) and mean.rate("b", "a") == pytest.approx(20)
    base = topo(["a", "b"], ("a", "b", 4, 8))
    late = [(15, {ab: 10}), (45, {ba: 2})]
    mean = mean_rates(late, 60, base)        # ab: 4 for 15 s then 10; ba: 8 for 45 s then 2
    assert mean.rate("a", "b") == pytest.approx((4 * 15 + 10 * 45) / 60)
    assert mean.rate("b", "a") == pytest.approx((8 * 45 + 2 * 15) / 60)
    assert mean.name == "t" and mean.dcs == ("a", "b")
    with pytest.raises(TopologyError, match="does not start at t = 0"):
        mean_rates(late, 60)
    with pytest.raises(TopologyError, match="not a link"):
        mean_rates([(0, {("a", "c"): 1})], 60, base)
    assert rates_at(trace, 45) == {ab: 40, ba: 20}


def test_mean_of_paper9_trace_is_plausible():
    t = load_topology("paper9")
    trace = load_trace("paper9-fluctuating", period_s=20, duration_s=3600)
    mean = mean_rates(trace, 3600, t)
    assert mean.dcs == t.dcs and len(mean.links) == 13
    assert all(70 < r < 105 for r in mean.rates().values())        # ~ (20 + 155) / 2
    assert math.isclose(mean_rates(trace, 3600).rate("dc1", "dc2"), mean.rate("dc1", "dc2"))
