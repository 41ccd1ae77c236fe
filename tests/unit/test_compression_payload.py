"""The compressed chunk's bytes: round trips, the smaller of index list and bitmap, exact
indices for any size, and a clear PayloadError (never a crash) for anything malformed."""
import numpy as np
import pytest

from netstorm.geoserver.compression import payload
from netstorm.geoserver.compression.payload import PayloadError


def test_sparse_round_trips_as_index_list_or_bitmap_whichever_is_smaller():
    rng = np.random.default_rng(0)
    for n, count in [(1000, 3), (1000, 200), (1000, 900), (17, 17), (64, 0)]:
        idx = np.sort(rng.choice(n, count, replace=False))
        values = rng.standard_normal(count).astype(np.float32)
        wire = payload.sparse(idx, values, n)
        fmt = payload.HEADER.unpack(wire[:payload.HEADER.size].tobytes())[0]
        sizes = {payload.INDEX: payload.index_bytes(n, count),
                 payload.BITMAP: payload.bitmap_bytes(n, count)}
        assert len(wire) == sizes[fmt] == min(sizes.values())
        want = np.zeros(n, np.float32)
        want[idx] = values
        assert np.array_equal(payload.decode(wire, n), want)


def test_indices_are_exact_for_chunks_beyond_four_billion_elements():
    assert payload._index_dtype(1 << 32) == np.uint32
    assert payload._index_dtype((1 << 32) + 1) == np.uint64
    assert payload.index_bytes((1 << 32) + 1, 10) == payload.HEADER.size + 10 * (8 + 4)


def test_half_and_twobit_round_trip():
    x = np.array([0.1, -2.5, 65504.0, 0.0], np.float32)
    assert np.array_equal(payload.decode(payload.half(x), 4), x.astype(np.float16))
    codes = np.array([0, 1, 2, 1, 0], np.uint8)
    wire = payload.twobit(codes, 0.5)
    assert len(wire) == payload.HEADER.size + 2
    assert np.array_equal(payload.decode(wire, 5), [0, 0.5, -0.5, 0.5, 0])


def _header(fmt, code, n, count, scale=0.0):
    return payload.HEADER.pack(fmt, code, n, count, scale)


@pytest.mark.parametrize("wire, match", [
    (b"short", "shorter than its header"),
    (_header(9, 1, 4, 0), "unknown payload format 9"),
    (_header(payload.INDEX, 7, 4, 0), "unknown value type"),
    (_header(payload.INDEX, 1, 5, 0), "encodes 5 elements, the chunk has 4"),
    (_header(payload.INDEX, 1, 4, 9), "claims 9 entries"),
    (_header(payload.INDEX, 1, 4, 2) + bytes(7), "body is 7 bytes, expected 16"),
    (_header(payload.INDEX, 1, 4, 2) + np.array([2, 1], "<u4").tobytes() + bytes(8),
     "not ascending"),
    (_header(payload.INDEX, 1, 4, 1) + np.array([4], "<u4").tobytes() + bytes(4),
     "not ascending within the chunk"),
    (_header(payload.BITMAP, 1, 4, 2) + bytes([0b0001]) + bytes(8), "bits do not match"),
    (_header(payload.BITMAP, 1, 4, 1) + bytes([0b10001]) + bytes(4), "bits do not match"),
    (_header(payload.TWOBIT, 0, 4, 4, 0.5) + bytes([0b11]), "unused code 3"),
    (_header(payload.TWOBIT, 0, 4, 4, float("nan")) + bytes(1), "not a positive number"),
    (_header(payload.HALF, 2, 4, 4) + bytes(6), "body is 6 bytes, expected 8"),
])
def test_malformed_payloads_raise_payload_error(wire, match):
    with pytest.raises(PayloadError, match=match):
        payload.decode(np.frombuffer(wire, np.uint8), 4)


def test_random_bytes_never_crash_the_decoder():
    rng = np.random.default_rng(1)
    for _ in range(2000):
        wire = rng.integers(0, 256, rng.integers(0, 80), dtype=np.uint8)
        if len(wire) >= payload.HEADER.size and rng.random() < 0.7:   # plausible headers
            wire[:payload.HEADER.size] = np.frombuffer(_header(
                int(rng.integers(1, 5)), int(rng.integers(0, 3)), 16,
                int(rng.integers(0, 17)), 0.5), np.uint8)
        try:
            out = payload.decode(wire, 16)
        except PayloadError:
            continue
        assert out.dtype == np.float32 and len(out) == 16
