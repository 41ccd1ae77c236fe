"""``bench.py --mode train``, one worker's part: train a real model on real data with
gluon.Trainer on the kvstore under test, and record test accuracy against wall time.

Every system gets the same seed, data shard, model, initial weights and hyper-parameters;
only the kvstore (and its compression) differ. Rank 0 evaluates the test set every
``eval_every`` iterations (and after the last); the time it spends evaluating is left out
of its clock, so a curve point is (training seconds since the first iteration, accuracy).
Each iteration also records how long this worker computed (forward and backward, before
``Trainer.step``): the rest of an iteration is synchronization, whose share of the whole is
the run's communication fraction.
"""
from __future__ import annotations

import hashlib
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from netstorm.datasets import load, shard

__all__ = ["MODELS", "build_model", "evaluate", "gradient_bytes", "model_bytes", "push_then_pull",
           "train"]

MODELS = ("mlp",)


def build_model(name: str, hidden: int, seed: int):
    """``mlp``: Flatten, two ReLU layers of ``hidden`` units, 10 outputs (about 1.1 M
    parameters for 1024 on digits: a model whose synchronization outweighs its compute by
    far on a WAN). The same initial weights on every rank."""
    if name not in MODELS:
        raise ValueError(f"train mode model {name!r} is unknown; known: {', '.join(MODELS)}")
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Flatten(), gluon.nn.Dense(hidden, activation="relu"),
            gluon.nn.Dense(hidden, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def evaluate(net, x, y, batch_size: int = 1000) -> float:
    correct = 0
    for i in range(0, len(x), batch_size):
        out = net(mx.nd.array(x[i:i + batch_size]))
        correct += int((out.argmax(axis=1).asnumpy() == y[i:i + batch_size]).sum())
    return correct / float(len(x))


def push_then_pull(kv):
    """Make a stock MXNet kvstore's ``pushpull`` a ``push`` then a ``pull``. MXNet 1.9's
    gluon.Trainer synchronizes dense gradients with ``pushpull``, which its dist kvstore
    refuses when gradient compression is on ("Compression not supported with PushPull",
    kvstore_dist.h); ``push`` + ``pull`` is what Module (and Trainer up to MXNet 1.5) do,
    with the same result. netstorm's kvstore compresses under ``pushpull`` itself."""
    def pushpull(key, value, out=None, priority=0):
        kv.push(key, value, priority=priority)
        kv.pull(key, out=value if out is None else out, priority=priority)
    kv.pushpull = pushpull
    return kv


def train(kv, args) -> tuple:
    """Run ``args.iters`` iterations; returns (per-iteration seconds, checks dict, which
    includes the model's gradient bytes)."""
    data = load(args.data, seed=args.seed)
    x, y, batches = shard(data.x_train, data.y_train, kv.rank, kv.num_workers,
                          args.batch_size)
    if batches == 0:
        raise SystemExit(f"rank {kv.rank}: a shard of {len(x)} samples is smaller than the "
                         f"batch size {args.batch_size}")
    net = build_model(args.model, args.hidden, args.seed)
    net(mx.nd.array(x[:1]))                                     # resolve shapes
    if args.compression and isinstance(kv, mx.kvstore.KVStore):     # stock MXNet
        push_then_pull(kv)
    # DGC momentum correction applies the momentum inside compression, so the optimizer
    # has none of its own (the servers refuse one that has)
    dgc = bool((args.compression or {}).get("momentum"))
    trainer = gluon.Trainer(net.collect_params(), args.optimizer,
                            {"learning_rate": args.lr, "momentum": 0.0 if dgc else args.momentum},
                            kvstore=kv, compression_params=args.compression)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    order_rng = np.random.RandomState(args.seed + 1000 * kv.rank)
    order = order_rng.permutation(len(x))
    times, compute, curve = [], [], []
    clock, evaluating = time.perf_counter(), 0.0
    for it in range(1, args.iters + 1):
        b = (it - 1) % batches
        if b == 0 and it > 1:
            order = order_rng.permutation(len(x))
        idx = order[b * args.batch_size:(b + 1) * args.batch_size]
        data_nd, label = mx.nd.array(x[idx]), mx.nd.array(y[idx])
        start = time.perf_counter()
        with autograd.record():
            loss = loss_fn(net(data_nd), label)
        loss.backward()
        mx.nd.waitall()
        if args.extra_s:
            time.sleep(args.extra_s)          # a straggler: slower accelerators
        computed = time.perf_counter()
        trainer.step(args.batch_size)
        mx.nd.waitall()
        times.append(time.perf_counter() - start)
        compute.append(computed - start)
        if kv.rank == 0 and (it % args.eval_every == 0 or it == args.iters):
            paused = time.perf_counter()
            acc = evaluate(net, data.x_test, data.y_test)
            wall = paused - clock - evaluating
            evaluating += time.perf_counter() - paused
            curve.append([round(wall, 3), round(acc, 4), it])
            print(f"iter {it}/{args.iters} {times[-1]:.3f}s test accuracy {acc:.4f} "
                  f"at {wall:.1f}s", flush=True)
    digest = hashlib.sha256()
    params = net.collect_params()
    for name in sorted(params):
        digest.update(params[name].data().asnumpy().tobytes())
    return times, {"weights_sha256": digest.hexdigest(), "compute_s": compute,
                   "model_bytes": gradient_bytes(net),
                   "accuracy_curve": curve, "dataset": data.name,
                   "train_samples": len(data.x_train), "test_samples": len(data.x_test)}


def gradient_bytes(net) -> int:
    """The bytes of fp32 gradients one iteration synchronizes (what dense systems move)."""
    return sum(4 * int(np.prod(p.shape)) for p in net.collect_params().values()
               if p.grad_req != "null")


def model_bytes(name: str, hidden: int, data: str, seed: int = 42) -> int:
    """:func:`gradient_bytes` of the train-mode model ``name`` on ``data`` (for the bench
    process, before any worker runs)."""
    net = build_model(name, hidden, seed)
    net(mx.nd.array(load(data, seed=seed).x_train[:1]))
    return gradient_bytes(net)
