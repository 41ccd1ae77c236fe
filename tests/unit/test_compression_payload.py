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


def test_int8_round_trips_at_one_byte_per_element_plus_the_header():
    codes = np.array([0, 127, -127, 5, -1], np.int8)
    wire = payload.int8(codes, 0.25)
    assert len(wire) == payload.HEADER.size + 5
    assert np.array_equal(payload.decode(wire, 5), codes.astype(np.float32) * np.float32(0.25))


@pytest.mark.parametrize("n, count, fmt", [(1000, 5, payload.Q2INDEX),
                                           (1000, 400, payload.Q2BITMAP),
                                           (64, 0, payload.Q2INDEX), (3, 3, payload.Q2BITMAP)])
def test_sparse_2bit_round_trips_as_index_list_or_bitmap_whichever_is_smaller(n, count, fmt):
    """Code c: bit 1 the sign, bit 0 high or low."""
    rng = np.random.default_rng(n + count)
    idx = np.sort(rng.choice(n, count, replace=False))
    codes = rng.integers(0, 4, count).astype(np.uint8)
    wire = payload.sparse_2bit(idx, codes, (0.5, 3.0), n)
    header = payload.HEADER.unpack(wire[:payload.HEADER.size].tobytes())
    sizes = {payload.Q2INDEX: payload.q2_index_bytes(n, count),
             payload.Q2BITMAP: payload.q2_bitmap_bytes(n, count)}
    assert header[0] == fmt and len(wire) == sizes[fmt] == min(sizes.values())
    want = np.zeros(n, np.float32)
    want[idx] = np.array([0.5, 3.0, -0.5, -3.0], np.float32)[codes]
    assert np.array_equal(payload.decode(wire, n), want)


def _header(fmt, code, n, count, scale=0.0):
    return payload.HEADER.pack(fmt, code, n, count, scale)


def _levels(low, high):
    return np.array([low, high], "<f4").tobytes()


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
    (_header(payload.INT8, 0, 4, 4, 0.5) + bytes(3), "INT8 payload body is 3 bytes, expected 4"),
    (_header(payload.INT8, 0, 4, 3, 0.5) + bytes(4), "claims 3 entries, it has one per"),
    (_header(payload.INT8, 0, 4, 4, float("nan")) + bytes(4), "INT8 scale nan is not a pos"),
    (_header(payload.INT8, 0, 4, 4, float("inf")) + bytes(4), "INT8 scale inf is not a pos"),
    (_header(payload.INT8, 0, 4, 4, 0.0) + bytes(4), "INT8 scale 0.0 is not a positive"),
    (_header(payload.INT8, 0, 4, 4, -1.0) + bytes(4), "INT8 scale -1.0 is not a positive"),
    (_header(payload.INT8, 0, 4, 4, 0.5) + bytes([0, 0x80, 0, 0]), "unused code -128"),
    (_header(payload.Q2INDEX, 0, 4, 9) + _levels(1, 2), "claims 9 entries"),
    (_header(payload.Q2INDEX, 0, 4, 2) + _levels(1, 2) + bytes(8),
     "Q2INDEX payload body is 16 bytes, expected 17"),
    (_header(payload.Q2INDEX, 0, 4, 1) + _levels(1, 2) + np.array([4], "<u4").tobytes()
     + bytes(1), "Q2INDEX payload's indices are not ascending within the chunk"),
    (_header(payload.Q2INDEX, 0, 4, 2) + _levels(1, 2) + np.array([3, 3], "<u4").tobytes()
     + bytes(1), "Q2INDEX payload's indices are not ascending"),
    (_header(payload.Q2INDEX, 0, 4, 1) + _levels(float("nan"), 2)
     + np.array([0], "<u4").tobytes() + bytes(1), r"levels nan, 2.0 are not numbers"),
    (_header(payload.Q2INDEX, 0, 4, 1) + _levels(1, float("inf"))
     + np.array([0], "<u4").tobytes() + bytes(1), "levels 1.0, inf are not numbers"),
    (_header(payload.Q2INDEX, 0, 4, 1) + _levels(-1, 2)
     + np.array([0], "<u4").tobytes() + bytes(1), "levels -1.0, 2.0 are not numbers"),
    (_header(payload.Q2INDEX, 0, 4, 1) + _levels(3, 2)
     + np.array([0], "<u4").tobytes() + bytes(1), "not numbers 0 <= low <= high"),
    (_header(payload.Q2INDEX, 0, 4, 1) + _levels(1, 2) + np.array([0], "<u4").tobytes()
     + bytes([0b0100]), "codes go beyond its 1 entries"),
    (_header(payload.Q2BITMAP, 0, 4, 2) + _levels(1, 2) + bytes([0b0001, 0]),
     "Q2BITMAP payload's bits do not match its 2 values"),
    (_header(payload.Q2BITMAP, 0, 4, 1) + _levels(1, 2) + bytes([0b10001, 0]),
     "Q2BITMAP payload's bits do not match"),
    (_header(payload.Q2BITMAP, 0, 4, 1) + _levels(1, 2) + bytes([0b0001]),
     "Q2BITMAP payload body is 9 bytes, expected 10"),
])
def test_malformed_payloads_raise_payload_error(wire, match):
    with pytest.raises(PayloadError, match=match):
        payload.decode(np.frombuffer(wire, np.uint8), 4)


def test_random_bytes_never_crash_the_decoder():
    rng = np.random.default_rng(1)
    for _ in range(4000):
        wire = rng.integers(0, 256, rng.integers(0, 80), dtype=np.uint8)
        if len(wire) >= payload.HEADER.size and rng.random() < 0.7:   # plausible headers
            wire[:payload.HEADER.size] = np.frombuffer(_header(
                int(rng.integers(1, 9)), int(rng.integers(0, 3)), 16,
                int(rng.integers(0, 17)), 0.5), np.uint8)
        try:
            out = payload.decode(wire, 16)
        except PayloadError:
            continue
        assert out.dtype == np.float32 and len(out) == 16


@pytest.mark.parametrize("make", [
    lambda rng: payload.int8(rng.integers(-127, 128, 40).astype(np.int8), 0.125),
    lambda rng: payload.sparse_2bit([1, 7, 30], [0, 3, 2], (0.5, 2.0), 40),
    lambda rng: payload.sparse_2bit(np.arange(0, 40, 2), rng.integers(0, 4, 20), (1, 4), 40),
], ids=["int8", "q2index", "q2bitmap"])
def test_corrupted_int8_and_2bit_payloads_decode_or_raise_payload_error(make):
    """Each valid payload with a byte changed, bytes cut off or added: a PayloadError or a
    chunk of the right size, never another exception (an IndexError, a numpy error)."""
    rng = np.random.default_rng(2)
    valid = make(rng)
    assert len(payload.decode(valid, 40)) == 40
    refused = 0
    for trial in range(600):
        wire = valid.copy()
        if trial % 3 == 0:
            wire[rng.integers(0, len(wire))] = rng.integers(0, 256)
        elif trial % 3 == 1:
            wire = wire[:rng.integers(0, len(wire))]
        else:
            wire = np.concatenate([wire, rng.integers(0, 256, rng.integers(1, 9), np.uint8)])
        try:
            out = payload.decode(wire, 40)
        except PayloadError:
            refused += 1
            continue
        assert out.dtype == np.float32 and len(out) == 40
    assert refused >= 400        # every cut or added byte at least
