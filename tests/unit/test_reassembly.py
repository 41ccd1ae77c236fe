"""geoserver.reassembly: parts in any order, overlapping or repeated, give the exact chunk."""
import random

import numpy as np
import pytest

from netstorm.geoserver.server.wan.reassembly import PartError, Reassembler


def random_parts(rng, total, pieces):
    cuts = sorted(rng.sample(range(1, total), min(pieces - 1, total - 1)))
    bounds = [0] + cuts + [total]
    return [(a, b) for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("seed", range(20))
def test_random_splits_in_random_order_rebuild_the_chunk_exactly(seed):
    rng = random.Random(seed)
    total = rng.randint(1, 5000)
    data = np.random.RandomState(seed).randint(-99, 99, total).astype(np.float32)
    parts = random_parts(rng, total, rng.randint(1, 6))
    extra = [rng.choice(parts) for _ in range(rng.randint(0, 2))]      # re-sent parts
    order = parts + extra
    rng.shuffle(order)
    re = Reassembler(max_elements=10000)
    results = [re.add("c", a, total, data[a:b]) for a, b in order]
    done = [r for r in results if r is not None]
    assert len(done) == 1 and np.array_equal(done[0], data)
    assert re.pending == 0


def test_overlapping_resend_after_a_split_completes_once():
    data = np.arange(100, dtype=np.float32)
    re = Reassembler(max_elements=1000)
    assert re.add(("k", 1), 0, 100, data[:70]) is None
    whole = re.add(("k", 1), 0, 100, data)                # the whole chunk, another way
    assert np.array_equal(whole, data)
    assert re.add(("k", 1), 70, 100, data[70:]) is None    # the late relayed part: dropped
    assert re.pending == 0


def test_bad_parts_are_refused_and_lose_nothing():
    re = Reassembler(max_elements=100)
    data = np.ones(10, np.float32)
    for start, total in [(-1, 10), (5, 10), (0, 1000), (0, 0)]:
        with pytest.raises(PartError):
            re.add("c", start, total, data)
    re.add("c", 0, 20, data)
    with pytest.raises(PartError):
        re.add("c", 10, 30, data)                        # disagrees on the total
    with pytest.raises(PartError):
        re.add("c", 10, 20, data.astype(np.float16))     # disagrees on the dtype
    assert np.array_equal(re.add("c", 10, 20, data * 2), np.r_[data, data * 2])


def test_incomplete_chunks_are_bounded_per_peer_and_released_when_complete():
    from netstorm.geoserver.policy.chunking import ENTRY_BYTES
    one = 100 * 4 + ENTRY_BYTES
    re = Reassembler(max_elements=1000, held_bytes=2 * one)
    data = np.arange(100, dtype=np.float32)
    assert re.add(("k", 0), 0, 100, data[:50], peer="b") is None
    assert re.add(("k", 1), 0, 100, data[:50], peer="b") is None
    with pytest.raises(PartError, match=f"{2 * one} bytes of incomplete chunks are already "
                                        f"kept for b"):
        re.add(("k", 2), 0, 100, data[:50], peer="b")
    assert re.add(("k", 2), 0, 100, data[:50], peer="c") is None      # c has its own budget
    assert np.array_equal(re.add(("k", 0), 50, 100, data[50:], peer="b"), data)
    assert re.held == {"b": one, "c": one} and re.pending == 2
    assert re.add(("k", 3), 0, 100, data[:50], peer="b") is None      # room again
