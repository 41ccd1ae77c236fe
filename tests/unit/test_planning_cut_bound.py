"""netstorm.scheduler.planning.cut_bound: the cut lower bound."""
import itertools

import pytest

from netstorm.scheduler.planning import (MAX_CUT_DCS, cut_lower_bound, cut_lower_bound_s,
                                         lower_bound_s, volume_lower_bound_s)
from netstorm.scheduler.planning.cut_bound import _flow_cut
from netstorm.scheduler.topology import Link, Topology, TopologyError
from netstorm.wan.builtin import BUILTINS, full_mesh, load_topology
from planning_cases import RANDOM, topo

MB10 = 10_000_000


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


def test_ring_and_bad_size():
    ring = topo([f"d{i}" for i in range(12)], *[(f"d{i}", f"d{(i + 1) % 12}", 10)
                                                  for i in range(12)])
    assert cut_lower_bound_s(ring, MB10) == pytest.approx(4.0)    # any cut crosses 2 links
    with pytest.raises(TopologyError, match="model_bytes must be > 0"):
        cut_lower_bound(ring, 0)


@pytest.mark.parametrize("case", RANDOM[:12], ids=lambda t: t.name)
def test_max_flows_find_the_enumerated_bound(case):
    """Above 22 DCs the bound comes from max-flows; on smaller graphs both agree."""
    assert case.dcs and len(case.dcs) <= MAX_CUT_DCS
    side = _flow_cut(case)
    out = sum(case.rate(a, b) for a in side for b in case.dcs if b not in side)
    into = sum(case.rate(b, a) for a in side for b in case.dcs if b not in side)
    assert MB10 * 8 / (1e6 * min(out, into)) == pytest.approx(cut_lower_bound_s(case, MB10),
                                                               rel=1e-12)


def test_large_meshes_get_a_bound_from_max_flows():
    # 40 DCs, full mesh at 1 Mbit/s but d0 with 0.5 Mbit/s links: its own cut decides
    dcs = [f"d{i}" for i in range(40)]
    big = Topology("big", tuple(dcs), tuple(
        Link(a, b, 0.5 if a == "d0" else 1.0, 0.5 if a == "d0" else 1.0)
        for a, b in itertools.combinations(dcs, 2)))
    seconds, side = cut_lower_bound(big, MB10)
    assert side == frozenset({"d0"}) and seconds == pytest.approx(80 / (39 * 0.5))


# --- the volume bound ------------------------------------------------------------------------

def test_volume_bound_counts_2_v_minus_1_model_sizes_over_every_direction():
    """Three DCs, links of 10/30 and 20/40 Mbit/s: 2·2·8·10 MB over 100 Mbit/s in all."""
    t = topo(["a", "b", "c"], ("a", "b", 10, 30), ("b", "c", 20, 40))
    assert volume_lower_bound_s(t, MB10) == pytest.approx(2 * 2 * 8 * MB10 / 100e6)
    assert lower_bound_s(t, MB10) == max(volume_lower_bound_s(t, MB10),
                                         cut_lower_bound_s(t, MB10))
    with pytest.raises(TopologyError, match="model_bytes"):
        volume_lower_bound_s(t, 0)


def test_on_a_two_dc_link_the_volume_bound_is_below_the_cut_bound():
    """Two DCs: one B each way; the cut bound charges each direction its own rate, the
    volume bound only the sum, so it is lower (here 2B/40 against B/10)."""
    t = topo(["p", "q"], ("p", "q", 10, 30))
    assert volume_lower_bound_s(t, MB10) < cut_lower_bound_s(t, MB10)
    assert lower_bound_s(t, MB10) == cut_lower_bound_s(t, MB10)


def test_dense_meshes_are_bound_by_volume_not_by_any_cut():
    """On a full mesh every DC must send about 2B in all, while a single cut sees B: the
    volume bound is far above the cut bound (docs/policy.md)."""
    from netstorm.bench.planning import random_full_mesh
    t = random_full_mesh(32, 1)
    assert volume_lower_bound_s(t, MB10) > 1.4 * cut_lower_bound_s(t, MB10)
    assert lower_bound_s(t, MB10) == volume_lower_bound_s(t, MB10)
