"""Error feedback through the real tree exchange: on random trees, random policy switches
and random message orders, every DC applies bit-identical totals, the totals applied plus
every DC's residual equal the sum of all contributions exactly (mass is delayed, never
lost), and no hop sends more than its budget."""
import random

import numpy as np
import pytest

from fakes import random_policy
from netstorm.geoserver.server.aggregation import TreeExchange
from netstorm.geoserver.policy.chunking import ChunkId
from netstorm.geoserver.compression.payload import PayloadError
from netstorm.geoserver.compression.feedback import DOWN, DenseCodec, ErrorFeedback, UP, WanCodec
from netstorm.geoserver.config.compression import CompressionConfig
from netstorm.geoserver.compression import codecs, payload
from netstorm.geoserver.policy.tree import PolicyBook
from netstorm.geoserver.core.wire import Kind

CHUNK_BYTES = 2048                       # 512 float32 per chunk: keys span several
KEY_SIZES = {0: 300, 1: 5000, 2: 9000}  # 5000 and 9000 chunks take the sampled top-k
CONFIGS = {
    "fp16": CompressionConfig("fp16"),
    "2bit": CompressionConfig("2bit", threshold=0.5),
    "bsc": CompressionConfig("bsc", ratio=0.05, warmup_rounds=3),
    "mpq": CompressionConfig("mpq", ratio=0.05, size_threshold=1000),
    "bsc-momentum": CompressionConfig("bsc", ratio=0.05, warmup_rounds=3, momentum=0.5),
    "int8": CompressionConfig("int8"),
    "topk2bit": CompressionConfig("topk2bit", ratio=0.05, warmup_rounds=3),
}


def run(config, seed: int, rounds: int = 10):
    rng = random.Random(seed)
    np_rng = np.random.RandomState(seed)
    dcs = [f"dc{i}" for i in range(rng.randint(2, 6))]
    starts = sorted({0, *(rng.randint(2, rounds) for _ in range(3))})
    policies = [random_policy(dcs, rng, 3, version=v + 1, start_round=start,
                              split=seed % 2 == 1) for v, start in enumerate(starts)]
    inbox, applied, sent = [], {dc: {} for dc in dcs}, []

    def make(dc):
        book = PolicyBook()
        for p in policies:
            book.add(p)
        codec = WanCodec(config, seed=len(sent))
        own = codec.own

        def recording_own(cid, array, where):  # what a DC really contributes (DGC: u, not g)
            out = own(cid, array, where)
            start, stop, _ = where
            given[cid.key][start:stop] += out
            return out
        codec.own = recording_own

        def send(target, kind, cid, array, encoded=False):
            sent.append((kind, cid, np.array(array), encoded))
            inbox.append((dc, target, kind, cid, np.array(array), encoded))

        def deliver(key, chunk, rnd, total):
            applied[dc][(key, chunk, rnd)] = np.array(total)
        return TreeExchange(dc, book, send, deliver, codec=codec), codec
    given = {key: np.zeros(size) for key, size in KEY_SIZES.items()}
    contributed = {key: np.zeros(size) for key, size in KEY_SIZES.items()}
    made = {dc: make(dc) for dc in dcs}
    layouts = {}
    schedule = PolicyBook()
    for p in policies:
        schedule.add(p)
    for rnd in range(1, rounds + 1):
        policy = schedule.for_round(rnd)
        for key, size in KEY_SIZES.items():
            layout = layouts[(rnd, key)] = policy.layout(key, size, 4, CHUNK_BYTES)
            for dc in dcs:
                g = (np_rng.randint(-16, 17, size) / 8).astype(np.float32)
                g[np_rng.rand(size) < 0.3] = 0
                contributed[key] += g
                for c, (a, b, tree) in enumerate(layout):
                    made[dc][0].contribute(ChunkId(key, c, rnd, policy.version, tree), g[a:b],
                                           (a, b, size))
        while inbox:
            source, target, kind, cid, array, encoded = inbox.pop(rng.randrange(len(inbox)))
            made[target][0].on_chunk(source, kind, cid, array, encoded)
    if not config.momentum:
        assert all(np.array_equal(given[k], contributed[k]) for k in KEY_SIZES)
    return dcs, made, applied, given, layouts, sent


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(4))
def test_mass_is_delayed_never_lost_and_replicas_stay_bit_identical(name, seed):
    config = CONFIGS[name]
    dcs, made, applied, given, layouts, sent = run(config, seed)
    assert all(ex.in_flight == 0 for ex, _ in made.values())
    assert any(encoded for *_, encoded in sent)        # compression really happened
    for key, size in KEY_SIZES.items():
        total = np.zeros(size)
        for (rnd, k), layout in layouts.items():
            if k != key:
                continue
            for c, (a, b, _) in enumerate(layout):
                mine = [applied[dc][(key, c, rnd)] for dc in dcs]
                assert all(m.tobytes() == mine[0].tobytes() for m in mine)
                total[a:b] += mine[0]
        kept = sum(codec.feedback.residual(key, size).astype(np.float64)
                   for _, codec in made.values())
        assert np.array_equal(total + kept, given[key]), name


@pytest.mark.parametrize("name, formats", [("bsc", (payload.INDEX, payload.BITMAP)),
                                           ("topk2bit", (payload.Q2INDEX, payload.Q2BITMAP))])
def test_sparse_types_never_send_more_than_their_budget_per_hop(name, formats):
    config = CONFIGS[name]
    _, _, _, _, _, sent = run(config, seed=7, rounds=8)
    assert sum(encoded for *_, encoded in sent) > 20
    for kind, cid, wire, encoded in sent:
        if not encoded:
            assert len(wire) <= CHUNK_BYTES // 4
            continue
        fmt, _, n, count, _ = payload.HEADER.unpack(wire[:payload.HEADER.size].tobytes())
        assert fmt in formats
        assert count <= codecs.budget(n, config.ratio_at(cid.rnd)), (kind, cid)
        assert len(wire) < 4 * n


def test_dense_codec_refuses_a_compressed_chunk_and_the_exchange_drops_it(caplog):
    policy = random_policy(["a", "b"], random.Random(0), 1)
    ex = TreeExchange("a", PolicyBook(policy), lambda *a: None, lambda *a: None)
    child = "b" if policy.trees[0].parent["b"] == "a" else None
    with pytest.raises(PayloadError):
        DenseCodec.decode(None, np.zeros(3, np.uint8), True)
    ex.on_chunk(child or "b", Kind.CHUNK_UP if child else Kind.CHUNK_DOWN,
                ChunkId(0, 0, 1, policy.version, 0), np.zeros(30, np.uint8), True)
    assert "compression is off" in caplog.text and ex.in_flight == 0


def test_a_payload_of_another_size_than_the_chunk_is_refused():
    config = CONFIGS["fp16"]
    codec = WanCodec(config)
    wrong = payload.half(np.ones(5, np.float32))
    with pytest.raises(PayloadError, match="5 elements, the chunk has 8"):
        codec.decode(ChunkId(0, 0, 1, 1, 0), wrong, True, (0, 8, 8))


def test_a_compressed_partial_sum_may_come_before_the_key_is_known_here():
    """A child's payload arriving before this DC contributed to the chunk (here: before its
    workers declared the key) is decoded by its own size (bounded by a chunk's) and summed
    once this DC contributes."""
    policy = random_policy(["a", "b"], random.Random(1), 1)
    root = policy.trees[0].root
    child = "b" if root == "a" else "a"
    mail, applied = [], {}

    def make(dc):
        codec = WanCodec(CompressionConfig("fp16"), max_elements=512 * 2)
        return TreeExchange(dc, PolicyBook(policy), lambda *m: mail.append((dc, *m)),
                            lambda key, chunk, rnd, total: applied.setdefault(dc, total),
                            codec=codec), codec
    (ex_root, _), (ex_child, _) = make(root), make(child)
    cid = ChunkId(0, 0, 1, policy.version, 0)
    ex_child.contribute(cid, np.full(600, 0.5, np.float32), (0, 600, 600))
    (_, _, kind, _, wire, encoded), = mail
    assert encoded
    ex_root.on_chunk(child, kind, cid, wire, encoded)       # the key is not known here yet
    assert ex_root.in_flight == 1 and not applied
    ex_root.contribute(cid, np.full(600, 1.0, np.float32), (0, 600, 600))
    assert np.array_equal(applied[root], np.full(600, 1.5))
    with pytest.raises(PayloadError, match="claims 2000 elements, more than a chunk's 1024"):
        WanCodec(CONFIGS["fp16"], max_elements=1024).decode(
            cid, payload.half(np.ones(2000, np.float32)), True)


def test_non_float32_keys_and_unknown_keys_travel_dense():
    fb = ErrorFeedback(CONFIGS["bsc"])
    ints = np.arange(10, dtype=np.int32)
    assert fb.encode(0, 0, ints, 1, 10, UP) == (ints, False)
    codec = WanCodec(CONFIGS["bsc"])
    x = np.ones(4, np.float32)
    assert codec.encode(ChunkId(0, 0, 1, 1, 0), x, DOWN) == (x, False)


def test_a_chunk_that_would_not_shrink_goes_dense_and_flushes_its_residual():
    fb = ErrorFeedback(CompressionConfig("bsc", ratio=1.0))
    x = np.arange(1, 9, dtype=np.float32)
    wire, encoded = fb.encode(3, 0, x, 1, 8, UP)
    assert not encoded and np.array_equal(wire, x)
    assert not fb.residual(3, 8).any()


def test_a_small_chunk_goes_dense_but_compressed_like_any_other():
    """6 elements: a 2bit payload would not be smaller, so the quantized values travel
    dense (MXNet quantizes every key) and the residual keeps what they lack."""
    fb = ErrorFeedback(CONFIGS["2bit"])
    x = np.array([0.4, -0.7, 0.1, 0.5, -0.2, 2.0], np.float32)
    wire, encoded = fb.encode(4, 0, x, 1, 6, UP)
    assert not encoded and wire.dtype == np.float32
    assert np.array_equal(wire, np.array([0, -0.5, 0, 0.5, 0, 0.5], np.float32))
    assert np.allclose(fb.residual(4, 6), x - wire)
    wire, _ = fb.encode(4, 0, np.full(6, 0.1, np.float32), 2, 6, UP)
    assert np.array_equal(wire, np.array([0.5, 0, 0, 0, 0, 0.5], np.float32))   # + residual


def test_mpq_sends_small_keys_in_half_and_large_ones_sparse():
    fb = ErrorFeedback(CONFIGS["mpq"])
    assert fb.scheme(UP, 999) == "fp16" and fb.scheme(UP, 1000) == "bsc"
    assert ErrorFeedback(CONFIGS["2bit"]).scheme(DOWN, 10) == "fp16"


def test_a_chunk_beyond_half_precision_goes_dense_instead_of_overflowing():
    fb = ErrorFeedback(CONFIGS["fp16"])
    ones = np.ones(100, np.float32)
    assert fb.encode(0, 0, ones, 1, 100, UP)[1]         # in range: half precision
    for bad in (70000.0, np.nan):
        x = ones.copy()
        x[7] = bad
        wire, encoded = fb.encode(0, 0, x, 1, 100, UP)
        assert not encoded and np.array_equal(wire, x, equal_nan=True)
        assert not fb.residual(0, 100).any()


def test_momentum_correction_accumulates_velocity_and_masks_what_was_sent():
    """DGC: u = m*u + g is what a DC contributes; a coordinate sent in a sparse payload
    restarts its momentum, one held back (or sent dense) keeps it."""
    feedback = ErrorFeedback(CompressionConfig("bsc", ratio=1 / 16, momentum=0.5))
    g = np.ones(64, np.float32)
    g[[3, 9, 27, 60]] = 8
    original = g.copy()
    assert np.array_equal(feedback.correct(0, 0, g, 64), g)
    u = feedback.correct(0, 0, g, 64)
    assert np.array_equal(u, 1.5 * g)                               # 0.5 * g + g
    wire, encoded = feedback.encode(0, 0, u, rnd=1, key_size=64, direction=UP)
    assert encoded
    sent = payload.decode(wire, 64)
    assert np.flatnonzero(sent).tolist() == [3, 9, 27, 60] and sent[3] == 12
    u = feedback.correct(0, 0, np.zeros(64, np.float32), 64)
    assert np.all(u[[3, 9, 27, 60]] == 0) and np.count_nonzero(u == 0.75) == 60
    assert np.array_equal(g, original)                               # input untouched
    dense = ErrorFeedback(CompressionConfig("bsc", ratio=0.5, momentum=0.5))
    u = dense.correct(1, 0, g[:8], 8)
    assert not dense.encode(1, 0, u, rnd=1, key_size=8, direction=UP)[1]   # went dense
    assert np.array_equal(dense.correct(1, 0, np.zeros(8, np.float32), 8), 0.5 * g[:8])
    off = ErrorFeedback(CompressionConfig("bsc", ratio=0.25))
    assert off.correct(0, 0, g, 64) is g


def _scale(wire) -> float:
    return payload.HEADER.unpack(wire[:payload.HEADER.size].tobytes())[4]


@pytest.mark.parametrize("direction", [UP, DOWN])
def test_int8_sends_a_byte_per_element_and_errs_by_at_most_half_its_scale(direction):
    n = 65536
    x = (np.random.default_rng(12).standard_normal(n) * 0.01).astype(np.float32)
    fb = ErrorFeedback(CONFIGS["int8"])
    wire, encoded = fb.encode(0, 0, x, 1, n, direction)
    assert encoded and len(wire) == n + payload.HEADER.size       # 1 byte + the scale
    assert len(wire) / n < 1.001
    sent, scale = payload.decode(wire, n), _scale(wire)
    assert np.abs(x).max() / 127 <= scale <= np.abs(x).max() / 127 * (1 + 2 ** -7)
    assert np.all(np.abs(x.astype(np.float64) - sent) <= scale / 2)
    assert np.abs(x - sent).max() > scale / 4                       # really quantized
    assert np.array_equal(sent + fb.residual(0, n), x)              # the rest is kept
    again, _ = fb.encode(0, 0, np.zeros(n, np.float32), 2, n, direction)
    assert np.array_equal(payload.decode(again, n) + fb.residual(0, n), x - sent)


@pytest.mark.parametrize("direction", [UP, DOWN])
def test_topk2bit_at_ratio_one_percent_sends_about_one_percent_of_dense_bytes(direction):
    n, ratio = 65536, 0.01
    x = np.random.default_rng(13).standard_normal(n).astype(np.float32)
    fb = ErrorFeedback(CompressionConfig("topk2bit", ratio=ratio))
    wire, encoded = fb.encode(0, 0, x, 1, n, direction)
    assert encoded and 0.01 <= len(wire) / x.nbytes <= 0.012        # measured: 1.08%
    fmt, _, _, count, _ = payload.HEADER.unpack(wire[:payload.HEADER.size].tobytes())
    assert fmt == payload.Q2INDEX and codecs.budget(n, ratio) // 2 <= count
    assert count <= codecs.budget(n, ratio)
    sent = payload.decode(wire, n)
    idx = np.flatnonzero(sent)
    assert len(idx) == count and len(np.unique(np.abs(sent[idx]))) == 2     # two levels
    assert np.array_equal(np.sign(sent[idx]), np.sign(x[idx]))               # signs kept
    assert np.abs(x[idx]).min() >= np.quantile(np.abs(x), 1 - 3 * ratio)     # the top
    kept = fb.residual(0, n)
    assert np.array_equal(sent + kept, x)
    assert np.array_equal(kept[sent == 0], x[sent == 0]) and kept[idx].any()


def test_topk2bit_warm_up_starts_with_every_element_in_2_bits():
    n = 8192
    x = np.random.default_rng(14).standard_normal(n).astype(np.float32)
    fb = ErrorFeedback(CompressionConfig("topk2bit", ratio=0.01, warmup_rounds=4))
    wire, encoded = fb.encode(0, 0, x, 1, n, UP)
    fmt, _, _, count, _ = payload.HEADER.unpack(wire[:payload.HEADER.size].tobytes())
    assert encoded and fmt == payload.Q2BITMAP and count == n
    assert len(wire) == payload.q2_bitmap_bytes(n, n) < 0.1 * x.nbytes   # 3/8 byte each
    assert np.count_nonzero(payload.decode(wire, n)) == n


@pytest.mark.parametrize("name", ["int8", "topk2bit"])
def test_an_all_zero_chunk_is_encoded_as_zeros(name):
    fb = ErrorFeedback(CONFIGS[name])
    wire, encoded = fb.encode(0, 0, np.zeros(1000, np.float32), 1, 1000, UP)
    assert encoded and not payload.decode(wire, 1000).any()
    assert not fb.residual(0, 1000).any()
    assert len(wire) == {"int8": payload.HEADER.size + 1000,
                         "topk2bit": payload.q2_index_bytes(1000, 0)}[name]


@pytest.mark.parametrize("name", ["int8", "topk2bit"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_chunk_not_finite_goes_dense_exact_and_flushes_its_residual(name, bad):
    fb = ErrorFeedback(CONFIGS[name])
    fb.encode(0, 0, np.linspace(-1, 1, 100, dtype=np.float32), 1, 100, UP)
    assert fb.residual(0, 100).any()
    x = np.ones(100, np.float32)
    x[7] = bad
    held = fb.residual(0, 100).copy()
    wire, encoded = fb.encode(0, 0, x, 2, 100, UP)
    assert not encoded and np.array_equal(wire, x + held, equal_nan=True)
    assert not fb.residual(0, 100).any()


def test_int8_takes_any_finite_magnitude_where_fp16_overflows():
    fb = ErrorFeedback(CONFIGS["int8"])
    x = np.array([3e38, -1e38, 70000.0, 1.0] * 25, np.float32)
    wire, encoded = fb.encode(0, 0, x, 1, 100, UP)
    sent = payload.decode(wire, 100)
    assert encoded and np.all(np.isfinite(sent))
    assert np.all(np.abs(x.astype(np.float64) - sent) <= _scale(wire) / 2)


def test_tiny_chunks_go_dense_quantized_under_int8_and_exact_under_topk2bit():
    """A payload (32 bytes of header, and more) is no smaller than 8 float32: int8's
    quantized values go dense (the residual keeps what they lack), topk2bit's chunk goes
    exact (its residual flushed), as 2bit's and bsc's."""
    x = np.array([0.3, -1.7, 0.01, 2.2, -0.9, 1.1, 0.0, 0.5], np.float32)
    int8 = ErrorFeedback(CONFIGS["int8"])
    wire, encoded = int8.encode(0, 0, x, 1, 8, UP)
    assert not encoded and wire.dtype == np.float32 and not np.array_equal(wire, x)
    assert np.all(np.abs(x - wire) <= codecs.int8_scale(2.2) / 2)
    assert np.array_equal(wire + int8.residual(0, 8), x)
    topk = ErrorFeedback(CONFIGS["topk2bit"])
    wire, encoded = topk.encode(0, 0, x, 1, 8, UP)
    assert not encoded and np.array_equal(wire, x) and not topk.residual(0, 8).any()


def test_recovery_rollback_restores_residuals_from_before_the_replayed_round():
    """server_restarts: a round encoded again after a replacement meets the residual (and
    DGC velocity) it met the first time; a round not replayed keeps its residual, and one
    two rounds back cannot be rolled back (named)."""
    config = CompressionConfig(type="bsc", ratio=0.25, momentum=0.5)
    feedback = ErrorFeedback(config, seed=1, replayable=True)
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(64).astype(np.float32) for _ in range(3)]

    def step(rnd):
        own = feedback.correct(0, 0, grads[rnd - 1], 64, rnd)
        return feedback.encode(0, 0, own, rnd, 64, UP)

    step(1)
    first = step(2)
    assert feedback.rollback({0: 2}) == []             # round 2 is final: kept
    assert feedback.rollback({0: 1}) == [0]
    again = step(2)
    assert np.array_equal(first[0], again[0])          # the same payload, bit for bit
    step(3)
    with pytest.raises(ValueError, match="key 0: round 3 was encoded"):
        feedback.rollback({0: 1})
    plain = ErrorFeedback(config, seed=1)
    plain.encode(0, 0, grads[0], 1, 64, UP)
    assert plain.rollback({0: 0}) == []                 # not replayable: nothing kept
