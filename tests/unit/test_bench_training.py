"""netstorm.bench.training: one worker's training run (on a local kvstore here; on every
system in tests/cluster/test_bench.py)."""
from types import SimpleNamespace

import mxnet as mx
import numpy as np
import pytest

from netstorm.bench.training import build_model, model_bytes, push_then_pull, train


def _args(**kw):
    return SimpleNamespace(**{"data": "digits", "seed": 42, "batch_size": 32, "model": "mlp",
                              "hidden": 64, "lr": 0.05, "momentum": 0.9, "compression": None,
                              "iters": 40, "eval_every": 10, "extra_s": 0.0, "optimizer": "sgd",
                              **kw})


def test_training_learns_and_records_a_curve_without_evaluation_time():
    times, checks = train(mx.kv.create("local"), _args())
    assert len(times) == len(checks["compute_s"]) == 40
    curve = checks["accuracy_curve"]
    assert [p[2] for p in curve] == [10, 20, 30, 40]
    assert curve[-1][1] > 0.8                                 # it learns digits
    walls = [p[0] for p in curve]
    assert walls == sorted(walls) and walls[-1] <= sum(times) + 0.5
    assert all(c <= t for c, t in zip(checks["compute_s"], times))
    again = train(mx.kv.create("local"), _args())[1]
    assert again["weights_sha256"] == checks["weights_sha256"]    # same seed, same weights


def test_a_straggler_computes_longer_and_it_counts_as_compute():
    times, checks = train(mx.kv.create("local"), _args(iters=3, eval_every=3, extra_s=0.05))
    assert all(c >= 0.05 for c in checks["compute_s"])
    assert checks["accuracy_curve"][0][0] >= 3 * 0.05


def test_model_bytes_counts_the_fp32_gradients():
    assert model_bytes("mlp", 16, "digits") == 4 * (64 * 16 + 16 + 16 * 16 + 16 + 16 * 10 + 10)
    with pytest.raises(ValueError, match="unknown; known: mlp"):
        build_model("resnet18_v1", 16, 0)


def test_push_then_pull_gives_what_pushpull_gives():
    results = []
    for wrap in (False, True):
        kv = mx.kv.create("local")
        if wrap:
            push_then_pull(kv)
        kv.init(3, mx.nd.zeros((4,)))
        out = mx.nd.zeros((4,))
        kv.pushpull(3, [mx.nd.ones((4,)), mx.nd.ones((4,)) * 2], out=out)
        results.append(out.asnumpy())
    assert np.array_equal(results[0], results[1]) and results[0][0] == 3
