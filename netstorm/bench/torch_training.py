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

from .shards import EVAL_BATCH, Epochs, digits_shard, lm_shard
from .torch_models import build_train_model
from .workloads import METRICS, WORKLOADS

__all__ = ["Epochs", "Task", "inner_optimizer", "prepare", "train"]


@dataclass
class Task:
    net: torch.nn.Module
    loss_fn: object         # (logits, labels) -> mean loss
    batch: object           # it -> (inputs, labels) tensors
    evaluate: object        # (forward) -> the metric's value
    info: dict = field(default_factory=dict)


def _digits(args, rank: int, size: int) -> Task:
    part = digits_shard(args, rank, size)
    net = build_train_model(WORKLOADS[args.workload].model, args.hidden, args.seed,
                            side=part.x.shape[-1])
    x_test, y_test = part.data.x_test, part.data.y_test

    def batch(it):
        idx = part.epochs.indices(it)
        return torch.from_numpy(part.x[idx]), torch.from_numpy(part.y[idx]).long()

    def accuracy(forward) -> float:
        with torch.no_grad():
            out = torch.cat([forward(torch.from_numpy(x_test[i:i + 1000]))
                             for i in range(0, len(x_test), 1000)])
        return float((out.argmax(dim=1).numpy() == y_test).mean())
    return Task(net, torch.nn.functional.cross_entropy, batch, accuracy, part.info)


def _lm(args, rank: int, size: int) -> Task:
    part = lm_shard(args, rank, size)
    net = build_train_model("transformer", args.hidden, args.seed, vocab=part.vocab,
                            layers=args.layers, heads=args.heads, seq_len=args.seq_len)
    train, held_out = part.train, part.held_out

    def loss_fn(logits, labels):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1))

    def batch(it):
        w = torch.from_numpy(train[part.epochs.indices(it)].astype(np.int64))
        return w[:, :-1], w[:, 1:]

    def mean_loss(forward) -> float:
        total, count = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(held_out), EVAL_BATCH):
                w = torch.from_numpy(held_out[i:i + EVAL_BATCH].astype(np.int64))
                total += float(loss_fn(forward(w[:, :-1]), w[:, 1:])) * w[:, 1:].numel()
                count += w[:, 1:].numel()
        return total / max(count, 1)
    return Task(net, loss_fn, batch, mean_loss, part.info)


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

