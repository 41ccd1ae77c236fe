"""The lossy steps: 2-bit quantization with error feedback against MXNet's own 2-bit
compression on the same inputs, and the sampled top-k selection."""
import numpy as np
import pytest

from netstorm.geoserver.compression import codecs, payload
from netstorm.geoserver.compression.feedback import ErrorFeedback, UP
from netstorm.geoserver.config.compression import CompressionConfig


def test_2bit_with_error_feedback_matches_mxnet_s_own_on_the_same_inputs():
    """MXNet's 'device' kvstore with {'type': '2bit'} quantizes each device's gradient with
    that device's residual and sums the dequantized values; two ErrorFeedbacks (one per
    device) summed must give the same numbers, round after round."""
    import mxnet as mx  # noqa: PLC0415 - a dependency; imported where it is needed
    rng = np.random.default_rng(3)
    n, threshold = 257, 0.5
    kv = mx.kv.create("device")
    kv.set_gradient_compression({"type": "2bit", "threshold": threshold})
    kv.init(0, mx.nd.zeros(n))
    ours = [ErrorFeedback(CompressionConfig("2bit", threshold=threshold)) for _ in range(2)]
    for rnd in range(1, 8):
        grads = [rng.normal(0, 0.4, n).astype(np.float32) for _ in range(2)]
        kv.push(0, [mx.nd.array(g, ctx=mx.cpu(i)) for i, g in enumerate(grads)])
        out = mx.nd.zeros(n)
        kv.pull(0, out=out)
        mine = sum(payload.decode(fb.encode(0, 0, g, rnd, n, UP)[0], n)
                   for fb, g in zip(ours, grads))
        assert np.array_equal(mine, out.asnumpy()), rnd


def test_quantize_2bit_codes():
    x = np.array([0.5, 0.49, -0.5, -0.51, 0.0, 3.0], np.float32)
    assert codecs.quantize_2bit(x, 0.5).tolist() == [1, 0, 2, 2, 0, 1]


def test_budget_is_at_least_one_and_at_most_n():
    assert codecs.budget(1000, 0.01) == 10
    assert codecs.budget(10, 0.001) == 1
    assert codecs.budget(10, 1.0) == 10


@pytest.mark.parametrize("n", [100, 4000, 50_000, 300_000])
def test_top_k_never_exceeds_k_and_finds_the_largest(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    k = max(1, n // 100)
    idx = codecs.top_k(x, k, np.random.default_rng(0))
    assert len(idx) <= k and np.all(np.diff(idx) > 0)
    exact = set(np.argsort(-np.abs(x))[:k].tolist())
    recall = len(exact & set(idx.tolist())) / k
    if n <= codecs.EXACT_BELOW:
        assert set(idx.tolist()) == exact
    else:
        assert recall >= 0.75, recall
        # what it picked is from the top: nothing below the 3k-th largest magnitude
        assert np.abs(x[idx]).min() >= np.sort(np.abs(x))[-3 * k]


def test_top_k_leaves_zeros_out_and_takes_everything_when_k_is_n():
    x = np.array([0, 3, 0, -1], np.float32)
    assert codecs.top_k(x, 4, np.random.default_rng(0)).tolist() == [1, 3]
    assert codecs.top_k(x, 1, np.random.default_rng(0)).tolist() == [1]


def _significant_bits(value) -> int:
    """Significant bits of a positive normal float32."""
    mantissa = int(np.array(value, np.float32).view(np.uint32)) & 0x7FFFFF
    return 24 - (mantissa & -mantissa).bit_length() + 1 if mantissa else 1


def test_shorten_keeps_eight_significant_bits_rounding_up_or_to_nearest():
    rng = np.random.default_rng(5)
    for value in np.concatenate([rng.random(200) * 10.0 ** rng.integers(-30, 30, 200),
                                 [1 / 3, 1.0, 255.0, 257.0, 1e-38]]):
        up, near = codecs.shorten(value, up=True), codecs.shorten(value)
        assert _significant_bits(up) <= 8 and _significant_bits(near) <= 8, value
        assert value <= up <= value * (1 + 2 ** -7), value
        assert abs(near - value) <= value * 2 ** -8, value
    assert codecs.shorten(256.9) == 256.0 and codecs.shorten(256.9, up=True) == 258.0
    assert codecs.shorten(0.0) == 0.0
    largest = float(np.finfo(np.float32).max)
    assert np.isfinite(codecs.shorten(largest, up=True))          # never infinite


@pytest.mark.parametrize("magnitude", [1e-30, 1e-3, 1.0, 3.0, 7e4, 1e30])
def test_int8_errs_by_at_most_half_a_scale_and_uses_the_whole_range(magnitude):
    rng = np.random.default_rng(int(np.log10(magnitude)) + 40)
    x = (rng.standard_normal(4099) * magnitude).astype(np.float32)
    peak = float(np.abs(x).max())
    scale = codecs.int8_scale(peak)
    assert peak / 127 <= scale <= peak / 127 * (1 + 2 ** -7)
    q = codecs.quantize_int8(x, scale)
    assert q.dtype == np.int8 and q.min() >= -127 and np.abs(q).max() >= 126
    sent = q.astype(np.float32) * scale
    assert np.all(np.abs(x.astype(np.float64) - sent) <= float(scale) / 2)
    assert np.array_equal(sent.astype(np.float64), q.astype(np.float64) * float(scale))  # exact


def test_int8_of_an_all_zero_chunk_is_zero_codes_with_a_positive_scale():
    assert codecs.int8_scale(0.0) == 1.0
    assert not codecs.quantize_int8(np.zeros(9, np.float32), 1.0).any()


def test_two_levels_keep_every_sign_and_beat_one_level():
    rng = np.random.default_rng(11)
    values = (rng.standard_normal(300) * 3).astype(np.float32)
    values = values[np.abs(values) > 1]                  # what a top-k keeps: no small ones
    codes, (low, high) = codecs.two_levels(values)
    sent = codecs.two_level_values(codes, (low, high))
    assert codes.max() <= 3 and 0 < low < high
    assert np.array_equal(np.sign(sent), np.sign(values))
    mags = np.abs(values)
    split = mags >= mags.mean()
    assert np.array_equal(codes & 1, split)
    assert abs(high - mags[split].mean()) <= high * 2 ** -8
    assert abs(low - mags[~split].mean()) <= low * 2 ** -8
    one_level = np.sign(values) * mags.mean()
    assert np.sum((values - sent) ** 2) < 0.5 * np.sum((values - one_level) ** 2)


def test_two_levels_of_equal_magnitudes_and_of_nothing():
    codes, levels = codecs.two_levels(np.array([2, -2, 2], np.float32))
    assert levels == (2, 2) and codes.tolist() == [1, 3, 1]
    codes, levels = codecs.two_levels(np.zeros(0, np.float32))
    assert len(codes) == 0 and levels == (0, 0)
