"""geoserver.routing: parts cover each chunk in the planned proportions; detours go around
stalled links by the widest two-hop path; a stalled link is retried later."""
import random

import pytest

from netstorm.geoserver.server.wan.routing import Router

RATES = {("a", "b"): 10.0, ("b", "a"): 10.0, ("a", "c"): 50.0, ("c", "a"): 50.0,
         ("c", "b"): 40.0, ("b", "c"): 40.0, ("a", "d"): 90.0, ("d", "b"): 5.0}


@pytest.mark.parametrize("seed", range(10))
def test_parts_cover_the_chunk_in_plan_proportions(seed):
    rng = random.Random(seed)
    router = Router("a", RATES, min_split_bytes=0)
    fractions = [rng.uniform(0.05, 0.3) for _ in range(2)]
    router.set_plan([["a", "b", "c", fractions[0]], ["a", "b", "d", fractions[1]],
                     ["z", "b", "c", 0.5]])                    # another DC's row: ignored
    n = rng.randint(10, 100000)
    parts = router.parts("b", n, 4, now=0.0)
    assert parts[0][1] == 0 and parts[-1][2] == n
    assert all(p[2] == q[1] for p, q in zip(parts, parts[1:]))      # contiguous, no overlap
    sizes = {via: stop - start for via, start, stop in parts}
    assert abs(sizes.get("c", 0) - fractions[0] * n) <= 1
    assert abs(sizes.get("d", 0) - fractions[1] * n) <= 1


def test_small_chunks_and_unplanned_links_go_whole_and_direct():
    router = Router("a", RATES)                     # 64 KiB minimum split
    router.set_plan([["a", "b", "c", 0.4]])
    assert router.parts("b", 1000, 4, 0.0) == [(None, 0, 1000)]
    assert router.parts("c", 10 ** 6, 4, 0.0) == [(None, 0, 10 ** 6)]
    assert len(router.parts("b", 10 ** 6, 4, 0.0)) == 2


def test_malformed_plans_are_ignored():
    router = Router("a", RATES)
    router.set_plan([["a", "b", "c"], ["a", "b", "c", 1.5], "x", ["a", "b", "c", "0.2"],
                     ["a", "b", "c", 0.6], ["a", "b", "d", 0.6]])   # sums to 1.2: dropped
    assert router.relays == {}


def test_a_stalled_link_is_detoured_by_the_widest_path_and_retried_later():
    router = Router("a", RATES, revive_s=30.0)
    assert router.mark_stalled("b", now=100.0) == "c"          # min(50, 40) beats min(90, 5)
    assert router.parts("b", 10 ** 6, 4, now=101.0) == [("c", 0, 10 ** 6)]
    assert router.next_hop("b", 101.0) == "c"
    assert router.next_hop("b", 101.0, came_from=("c",)) == "d"
    assert router.is_stalled("b", 129.0)
    assert router.parts("b", 10, 4, now=131.0) == [(None, 0, 10)]   # revived
    router.mark_stalled("c", 200.0)
    assert router.detour("b", 200.0) == "d"                    # not through a stalled relay
    assert Router("a", {}).mark_stalled("b", 0.0) is None      # no known links: no detour
