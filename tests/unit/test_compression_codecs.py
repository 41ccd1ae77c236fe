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
