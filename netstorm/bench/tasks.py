"""One worker's side of a workload (netstorm.bench.workloads): its data shard, the model, the
batches it trains on and how rank 0 evaluates.

* digits workloads: worker ``rank`` takes images rank, rank + N, ... of the training split
  (:func:`netstorm.datasets.shard`); a sample is an image; evaluation: accuracy on the
  whole test split.
* ``lm``: worker ``rank`` takes the ``rank``-th contiguous part of the training token stream
  (:func:`netstorm.text_corpus.contiguous_shard`), cut into non-overlapping windows of
  ``seq_len`` + 1 tokens; a sample is a window (``seq_len`` next-token predictions);
  evaluation: the mean cross-entropy per token (nats) on the first ``eval_tokens`` tokens of
  the validation split (fixed windows, the same at every evaluation).

Each epoch visits a worker's samples in an order drawn from ``seed + 1000 * rank``; every
worker steps the same number of times per epoch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import mxnet as mx
import numpy as np
from mxnet import gluon

from netstorm.datasets import load, shard
from netstorm.text_corpus import contiguous_shard, load_corpus, windows

from .models import build_model
from .workloads import WORKLOADS

__all__ = ["EVAL_BATCH", "Epochs", "Task", "accuracy", "digits_task", "lm_task", "mean_loss",
           "prepare"]

EVAL_BATCH = 64         # lm windows per forward pass while evaluating


class Epochs:
    """Which samples iteration ``it`` (1-based, consecutive calls) trains on: a fresh
    permutation of the shard every ``batches`` iterations."""

    def __init__(self, samples: int, batches: int, batch_size: int, rng):
        self.samples, self.batches, self.batch_size, self.rng = samples, batches, batch_size, rng
        self.order = rng.permutation(samples)

    def indices(self, it: int) -> np.ndarray:
        b = (it - 1) % self.batches
        if b == 0 and it > 1:
            self.order = self.rng.permutation(self.samples)
        return self.order[b * self.batch_size:(b + 1) * self.batch_size]


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


def _empty_shard(rank: int, samples: int, batch_size: int, what: str):
    return SystemExit(f"rank {rank}: a shard of {samples} {what} is smaller than the batch "
                      f"size {batch_size}")


def digits_task(args, rank: int, num_workers: int) -> Task:
    data = load(args.data, seed=args.seed)
    x, y, batches = shard(data.x_train, data.y_train, rank, num_workers, args.batch_size)
    if batches == 0:
        raise _empty_shard(rank, len(x), args.batch_size, "samples")
    net = build_model(WORKLOADS[args.workload].model, args.hidden, args.seed)
    net(mx.nd.array(x[:1]))                                     # resolve shapes
    epochs = Epochs(len(x), batches, args.batch_size,
                    np.random.RandomState(args.seed + 1000 * rank))

    def batch(it):
        idx = epochs.indices(it)
        return mx.nd.array(x[idx]), mx.nd.array(y[idx])
    return Task(net, gluon.loss.SoftmaxCrossEntropyLoss(), batch,
                lambda: accuracy(net, data.x_test, data.y_test),
                {"dataset": data.name, "train_samples": len(data.x_train),
                 "test_samples": len(data.x_test)})


def lm_task(args, rank: int, num_workers: int) -> Task:
    corpus = load_corpus(args.data, args.vocab)
    train = windows(contiguous_shard(corpus.train, rank, num_workers), args.seq_len)
    batches = len(train) // args.batch_size
    if batches == 0:
        raise _empty_shard(rank, len(train), args.batch_size, "windows")
    held_out = windows(corpus.valid, args.seq_len)[:max(1, args.eval_tokens // args.seq_len)]
    net = build_model("transformer", args.hidden, args.seed, vocab=len(corpus.vocab),
                      layers=args.layers, heads=args.heads, seq_len=args.seq_len)
    net(mx.nd.array(train[:1, :-1]))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(axis=-1)
    epochs = Epochs(len(train), batches, args.batch_size,
                    np.random.RandomState(args.seed + 1000 * rank))

    def batch(it):
        w = train[epochs.indices(it)]
        return mx.nd.array(w[:, :-1]), mx.nd.array(w[:, 1:])
    return Task(net, loss_fn, batch, lambda: mean_loss(net, loss_fn, held_out),
                {"dataset": corpus.name, "train_tokens": len(corpus.train),
                 "valid_tokens": len(corpus.valid), "eval_tokens": int(held_out.size
                                                                      - len(held_out)),
                 "vocab": len(corpus.vocab), "tokens_per_sample": args.seq_len,
                 "shard_windows": len(train)})


def prepare(args, rank: int, num_workers: int) -> Task:
    """The task of ``args.workload`` for worker ``rank`` of ``num_workers``."""
    return (lm_task if WORKLOADS[args.workload].metric == "loss" else digits_task)(
        args, rank, num_workers)
