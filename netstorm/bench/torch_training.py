"""``bench.py --mode train`` for the PyTorch systems, one worker's part: the workload's
model (its PyTorch twin, netstorm.bench.torch_models) on the same data, shards, batches and
hyper-parameters as netstorm.bench.training trains with MXNet, and the same result file.

The learning rate of SGD is multiplied by the number of workers: PyTorch's systems average
the workers' gradients where MXNet's stores sum them (Adam is left as it is: it does not
see a gradient's scale). A worker's compute time is its forward and backward pass (DDP's
all-reduce overlaps backward, so it counts there); O(iterations x model) in all.
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from netstorm.datasets import load, shard
from netstorm.text_corpus import contiguous_shard, load_corpus, windows

from .torch_models import build_train_model
from .workloads import METRICS, WORKLOADS

__all__ = ["Epochs", "Task", "inner_optimizer", "prepare", "train"]

EVAL_BATCH = 64         # lm windows per forward pass while evaluating (tasks.EVAL_BATCH)


class Epochs:
    """Which samples iteration ``it`` (1-based) trains on: netstorm.bench.tasks.Epochs' order
    (a fresh permutation of the shard every ``batches`` iterations, from the same seed)."""

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
    net: torch.nn.Module
    loss_fn: object         # (logits, labels) -> mean loss
    batch: object           # it -> (inputs, labels) tensors
    evaluate: object        # (forward) -> the metric's value
    info: dict = field(default_factory=dict)


def _empty(rank: int, have: int, batch_size: int, what: str) -> ValueError:
    return ValueError(f"worker {rank}'s shard has {have} {what}, fewer than one batch of "
                      f"{batch_size}: use a smaller --batch-size or fewer workers")


def _digits(args, rank: int, size: int) -> Task:
    data = load(args.data, seed=args.seed)
    x, y, batches = shard(data.x_train, data.y_train, rank, size, args.batch_size)
    if batches == 0:
        raise _empty(rank, len(x), args.batch_size, "samples")
    net = build_train_model(WORKLOADS[args.workload].model, args.hidden, args.seed,
                            side=x.shape[-1])
    epochs = Epochs(len(x), batches, args.batch_size,
                    np.random.RandomState(args.seed + 1000 * rank))

    def batch(it):
        idx = epochs.indices(it)
        return torch.from_numpy(x[idx]), torch.from_numpy(y[idx]).long()

    def accuracy(forward) -> float:
        with torch.no_grad():
            out = torch.cat([forward(torch.from_numpy(data.x_test[i:i + 1000]))
                             for i in range(0, len(data.x_test), 1000)])
        return float((out.argmax(dim=1).numpy() == data.y_test).mean())
    return Task(net, torch.nn.functional.cross_entropy, batch, accuracy,
                {"dataset": data.name, "train_samples": len(data.x_train),
                 "test_samples": len(data.x_test)})


def _lm(args, rank: int, size: int) -> Task:
    corpus = load_corpus(args.data, args.vocab)
    train = windows(contiguous_shard(corpus.train, rank, size), args.seq_len)
    batches = len(train) // args.batch_size
    if batches == 0:
        raise _empty(rank, len(train), args.batch_size, "windows")
    held_out = windows(corpus.valid, args.seq_len)[:max(1, args.eval_tokens // args.seq_len)]
    net = build_train_model("transformer", args.hidden, args.seed, vocab=len(corpus.vocab),
                            layers=args.layers, heads=args.heads, seq_len=args.seq_len)
    epochs = Epochs(len(train), batches, args.batch_size,
                    np.random.RandomState(args.seed + 1000 * rank))

    def loss_fn(logits, labels):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1))

    def batch(it):
        w = torch.from_numpy(train[epochs.indices(it)].astype(np.int64))
        return w[:, :-1], w[:, 1:]

    def mean_loss(forward) -> float:
        total, count = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(held_out), EVAL_BATCH):
                w = torch.from_numpy(held_out[i:i + EVAL_BATCH].astype(np.int64))
                total += float(loss_fn(forward(w[:, :-1]), w[:, 1:])) * w[:, 1:].numel()
                count += w[:, 1:].numel()
        return total / max(count, 1)
    return Task(net, loss_fn, batch, mean_loss,
                {"dataset": corpus.name, "train_tokens": len(corpus.train),
                 "valid_tokens": len(corpus.valid),
                 "eval_tokens": int(held_out.size - len(held_out)),
                 "vocab": len(corpus.vocab), "tokens_per_sample": args.seq_len,
                 "shard_windows": len(train)})


def prepare(args, rank: int, size: int) -> Task:
    """The task of ``args.workload`` for worker ``rank`` of ``size``."""
    return (_lm if WORKLOADS[args.workload].metric == "loss" else _digits)(args, rank, size)


def inner_optimizer(args, params, size: int) -> torch.optim.Optimizer:
    """The workload's optimizer over ``params`` (see the module doc for SGD's scale)."""
    if args.optimizer == "adam":
        return torch.optim.Adam(params, lr=args.lr, weight_decay=args.wd)
    if args.optimizer != "sgd":
        raise ValueError(f"the PyTorch systems train with sgd or adam, not {args.optimizer}")
    return torch.optim.SGD(params, lr=args.lr * size, momentum=args.momentum,
                           weight_decay=args.wd)


def train(task: Task, forward, opt, args, rank: int, finish=None) -> tuple:
    """``args.iters`` iterations of ``forward`` (the model, or DDP's wrapper of it) and
    ``opt``; ``finish()``, if given, runs after the last one (post-local SGD's final
    average). Returns (per-iteration seconds, the result file's checks)."""
    metric = METRICS[WORKLOADS[args.workload].metric]
    params = list(task.net.parameters())
    times, compute, curve, pauses, starts = [], [], [], [], []
    clock, evaluating, window = time.perf_counter(), 0.0, [None, None]
    for it in range(1, args.iters + 1):
        if it == 2:
            window[0] = time.monotonic()
        data, label = task.batch(it)
        start = time.perf_counter()
        starts.append(time.monotonic())
        opt.zero_grad()
        task.loss_fn(forward(data), label).backward()
        if args.extra_s:                      # a straggler: slower accelerators
            time.sleep(args.extra_s)
        computed = time.perf_counter()
        opt.step()
        ended = time.perf_counter()
        window[1] = time.monotonic()
        times.append(ended - start)
        compute.append(computed - start)
        if rank == 0 and (it % args.eval_every == 0 or it == args.iters):
            paused, paused_at = time.perf_counter(), time.monotonic()
            value = task.evaluate(task.net)
            wall = paused - clock - evaluating
            evaluating += time.perf_counter() - paused
            pauses.append([paused_at, time.monotonic()])
            curve.append([round(wall, 3), round(value, 4), it])
            shown = f" (perplexity {math.exp(min(value, 700)):.1f})" \
                if metric.name == "loss" else ""
            print(f"iter {it}/{args.iters} {times[-1]:.3f}s {metric.label} {value:.4f}{shown} "
                  f"at {wall:.1f}s", flush=True)
    if finish is not None:
        finish()
    digest = hashlib.sha256()
    for param in params:
        digest.update(param.detach().numpy().tobytes())
    return times, {"weights_sha256": digest.hexdigest(), "compute_s": compute,
                   "model_bytes": sum(p.numel() * 4 for p in params), "metric": metric.name,
                   "curve": curve, "batch_size": args.batch_size,
                   "window_monotonic": window if window[0] is not None else None,
                   "eval_monotonic": pauses, "iter_start_monotonic": starts, **task.info}

