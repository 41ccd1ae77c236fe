"""netstorm.bench.torch_training and torch_models' train-mode twins: the same sizes and
sample order as the MXNet side (netstorm.bench.models, tasks), SGD's scale, one short run."""
from types import SimpleNamespace

import mxnet as mx
import numpy as np
import pytest

from netstorm.bench import tasks
from netstorm.bench.models import build_model, parameter_count
from netstorm.bench.torch_models import build_train_model
from netstorm.bench.torch_training import inner_optimizer, prepare, train


@pytest.mark.parametrize("name,hidden,shape", [("mlp", 1024, (1, 1, 8, 8)),
                                               ("cnn", 256, (1, 1, 8, 8))])
def test_the_digits_twins_have_the_mxnet_models_parameter_counts(name, hidden, shape):
    net = build_model(name, hidden, 0)
    net(mx.nd.zeros(shape))
    twin = build_train_model(name, hidden, 0)
    assert sum(p.numel() for p in twin.parameters()) == parameter_count(net)


def test_the_language_model_twin_has_the_mxnet_models_parameter_count():
    twin = build_train_model("transformer", 128, 0, vocab=8192, layers=2, heads=4, seq_len=32)
    assert sum(p.numel() for p in twin.parameters()) == 2_506_240


@pytest.mark.parametrize("rank", [0, 2])
def test_the_batches_are_the_mxnet_workers_batches(rank):
    args = SimpleNamespace(workload="mlp-digits", data="digits", seed=7, batch_size=16,
                           hidden=8)
    mine, theirs = prepare(args, rank, 3), tasks.prepare(args, rank, 3)
    assert mine.info == theirs.info
    for it in range(1, 60):             # past an epoch's end: a new permutation
        (x, y), (mx_x, mx_y) = mine.batch(it), theirs.batch(it)
        assert np.array_equal(x.numpy(), mx_x.asnumpy())
        assert np.array_equal(y.numpy(), mx_y.asnumpy())


def test_sgd_is_scaled_by_the_workers_and_adam_is_not():
    params = list(build_train_model("mlp", 8, 0).parameters())
    args = SimpleNamespace(optimizer="sgd", lr=0.01, momentum=0.9, wd=0.0)
    assert inner_optimizer(args, params, 4).param_groups[0]["lr"] == pytest.approx(0.04)
    args.optimizer = "adam"
    assert inner_optimizer(args, params, 4).param_groups[0]["lr"] == 0.01


def test_a_short_run_on_the_digits_learns_and_writes_the_result_fields():
    args = SimpleNamespace(workload="mlp-digits", data="digits", seed=42, batch_size=32,
                           hidden=64, optimizer="sgd", lr=0.05, momentum=0.9, wd=0.0,
                           iters=30, eval_every=15, extra_s=0.0)
    task = prepare(args, 0, 1)
    opt = inner_optimizer(args, task.net.parameters(), 1)
    finished = []
    times, checks = train(task, task.net, opt, args, 0, lambda: finished.append(1))
    assert len(times) == 30 and finished == [1]
    assert [it for _, _, it in checks["curve"]] == [15, 30]
    assert checks["curve"][-1][1] > 0.5             # chance: 0.1
    assert checks["metric"] == "accuracy" and len(checks["weights_sha256"]) == 64
