"""One worker's side of a workload (netstorm.bench.workloads) with MXNet: the model, the
batches it trains on and how rank 0 evaluates, on its shard (netstorm.bench.shards: which
samples, in which order, evaluated on what).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import mxnet as mx
import numpy as np
from mxnet import gluon

from .models import build_model
from .shards import EVAL_BATCH, Epochs, digits_shard, lm_shard
from .workloads import WORKLOADS

__all__ = ["EVAL_BATCH", "Epochs", "Task", "accuracy", "digits_task", "lm_task", "mean_loss",
           "prepare"]


@dataclass
class Task:
    net: object
    loss_fn: object
    batch: object           # it -> (data NDArray, label NDArray)
    evaluate: object        # () -> the metric's value
    info: dict = field(default_factory=dict)    # what the worker's result file records


def accuracy(net, x, y, batch_size: int = 1000) -> float:
    correct = 0
    for i in range(0, len(x), batch_size):
        out = net(mx.nd.array(x[i:i + batch_size]))
        correct += int((out.argmax(axis=1).asnumpy() == y[i:i + batch_size]).sum())
    return correct / float(len(x))


def mean_loss(net, loss_fn, data: np.ndarray, batch_size: int = EVAL_BATCH) -> float:
    """Mean cross-entropy per token over windows ``data`` (``(N, seq_len + 1)``)."""
    total = 0.0
    for i in range(0, len(data), batch_size):
        chunk = data[i:i + batch_size]
        loss = loss_fn(net(mx.nd.array(chunk[:, :-1])), mx.nd.array(chunk[:, 1:]))
        total += float(loss.sum().asscalar())
    return total / len(data)


def digits_task(args, rank: int, num_workers: int) -> Task:
    part = digits_shard(args, rank, num_workers)
    net = build_model(WORKLOADS[args.workload].model, args.hidden, args.seed)
    net(mx.nd.array(part.x[:1]))                                # resolve shapes

    def batch(it):
        idx = part.epochs.indices(it)
        return mx.nd.array(part.x[idx]), mx.nd.array(part.y[idx])
    return Task(net, gluon.loss.SoftmaxCrossEntropyLoss(), batch,
                lambda: accuracy(net, part.data.x_test, part.data.y_test), part.info)


def lm_task(args, rank: int, num_workers: int) -> Task:
    part = lm_shard(args, rank, num_workers)
    net = build_model("transformer", args.hidden, args.seed, vocab=part.vocab,
                      layers=args.layers, heads=args.heads, seq_len=args.seq_len)
    net(mx.nd.array(part.train[:1, :-1]))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(axis=-1)

    def batch(it):
        w = part.train[part.epochs.indices(it)]
        return mx.nd.array(w[:, :-1]), mx.nd.array(w[:, 1:])
    return Task(net, loss_fn, batch, lambda: mean_loss(net, loss_fn, part.held_out),
                part.info)


def prepare(args, rank: int, num_workers: int) -> Task:
    """The task of ``args.workload`` for worker ``rank`` of ``num_workers`` (ValueError if
    its shard is smaller than a batch)."""
    return (lm_task if WORKLOADS[args.workload].metric == "loss" else digits_task)(
        args, rank, num_workers)
