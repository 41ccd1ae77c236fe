"""One worker's data for ``bench.py --mode train``, apart from any framework: its shard of a
workload's training set, the order it visits it in, and what rank 0 evaluates on. The MXNet
side (netstorm.bench.tasks) and the PyTorch side (netstorm.bench.torch_training) build their
models and batches on it, so both train on the same samples in the same order.

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

from dataclasses import dataclass

import numpy as np

from netstorm.datasets import load, shard
from netstorm.text_corpus import contiguous_shard, load_corpus, windows

__all__ = ["EVAL_BATCH", "DigitsShard", "Epochs", "LmShard", "digits_shard", "lm_shard"]

EVAL_BATCH = 64         # lm windows per forward pass while evaluating


class Epochs:
    """Which samples iteration ``it`` (1-based, consecutive calls) trains on: a fresh
    permutation of the shard every ``batches`` iterations. O(samples) per epoch."""

    def __init__(self, samples: int, batches: int, batch_size: int, rng):
        self.samples, self.batches, self.batch_size, self.rng = samples, batches, batch_size, rng
        self.order = rng.permutation(samples)

    def indices(self, it: int) -> np.ndarray:
        b = (it - 1) % self.batches
        if b == 0 and it > 1:
            self.order = self.rng.permutation(self.samples)
        return self.order[b * self.batch_size:(b + 1) * self.batch_size]


@dataclass
class DigitsShard:
    data: object            # netstorm.datasets' split (x_test, y_test evaluate)
    x: np.ndarray           # this worker's training images
    y: np.ndarray
    epochs: Epochs
    info: dict              # what the worker's result file records


@dataclass
class LmShard:
    train: np.ndarray       # this worker's windows, (N, seq_len + 1)
    held_out: np.ndarray    # the validation windows rank 0 evaluates on
    vocab: int
    epochs: Epochs
    info: dict


def _epochs(samples: int, batches: int, args, rank: int, what: str) -> Epochs:
    if batches == 0:
        raise ValueError(f"worker {rank}'s shard has {samples} {what}, fewer than one batch "
                         f"of {args.batch_size}: use a smaller --batch-size or fewer workers")
    return Epochs(samples, batches, args.batch_size,
                  np.random.RandomState(args.seed + 1000 * rank))


def digits_shard(args, rank: int, size: int) -> DigitsShard:
    """Worker ``rank`` of ``size``'s images of ``args.data`` (ValueError if fewer than one
    batch). O(dataset)."""
    data = load(args.data, seed=args.seed)
    x, y, batches = shard(data.x_train, data.y_train, rank, size, args.batch_size)
    return DigitsShard(data, x, y, _epochs(len(x), batches, args, rank, "samples"),
                       {"dataset": data.name, "train_samples": len(data.x_train),
                        "test_samples": len(data.x_test)})


def lm_shard(args, rank: int, size: int) -> LmShard:
    """Worker ``rank`` of ``size``'s windows of the corpus ``args.data`` (ValueError if fewer
    than one batch). O(corpus)."""
    corpus = load_corpus(args.data, args.vocab)
    train = windows(contiguous_shard(corpus.train, rank, size), args.seq_len)
    held_out = windows(corpus.valid, args.seq_len)[:max(1, args.eval_tokens // args.seq_len)]
    epochs = _epochs(len(train), len(train) // args.batch_size, args, rank, "windows")
    return LmShard(train, held_out, len(corpus.vocab), epochs,
                   {"dataset": corpus.name, "train_tokens": len(corpus.train),
                    "valid_tokens": len(corpus.valid),
                    "eval_tokens": int(held_out.size - len(held_out)),
                    "vocab": len(corpus.vocab), "tokens_per_sample": args.seq_len,
                    "shard_windows": len(train)})
