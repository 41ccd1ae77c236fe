"""netstorm.bench.models: shapes, parameter counts, causality, same initial weights."""
import mxnet as mx
import numpy as np
import pytest

from netstorm.bench.models import build_model, parameter_count


def test_the_default_sizes_have_the_documented_parameter_counts():
    mlp = build_model("mlp", 1024, 0)
    mlp(mx.nd.zeros((1, 1, 8, 8)))
    assert parameter_count(mlp) == 64 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10
    cnn = build_model("cnn", 256, 0)
    assert cnn(mx.nd.zeros((2, 1, 8, 8))).shape == (2, 10)
    assert parameter_count(cnn) == 283_786                   # "284 K"
    lm = build_model("transformer", 128, 0, vocab=8192, layers=2, heads=4, seq_len=32)
    assert lm(mx.nd.zeros((3, 32))).shape == (3, 32, 8192)
    assert parameter_count(lm) == 2_506_240                  # "2.51 M"


def test_the_language_model_is_causal_and_seeded():
    def make():
        net = build_model("transformer", 16, 7, vocab=20, layers=2, heads=2, seq_len=6)
        return net
    tokens = np.array([[1, 5, 7, 2, 9, 3]], dtype=np.float32)
    net = make()
    logits = net(mx.nd.array(tokens)).asnumpy()
    changed = tokens.copy()
    changed[0, 4] = 11                        # a later token cannot move earlier outputs
    other = net(mx.nd.array(changed)).asnumpy()
    np.testing.assert_allclose(other[0, :4], logits[0, :4], rtol=0, atol=1e-6)
    assert not np.allclose(other[0, 4:], logits[0, 4:])
    np.testing.assert_array_equal(make()(mx.nd.array(tokens)).asnumpy(), logits)


def test_unknown_models_and_bad_head_counts_are_refused():
    with pytest.raises(ValueError, match="unknown; known: mlp, cnn, transformer"):
        build_model("resnet18_v1", 16, 0)
    with pytest.raises(ValueError, match="hidden 30 is not a multiple of heads 4"):
        build_model("transformer", 30, 0, vocab=10, heads=4)
