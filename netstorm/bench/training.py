"""``bench.py --mode train``, one worker's part: train a workload (netstorm.bench.workloads)
with gluon.Trainer on the kvstore under test, and record its quality against wall time.

Every system gets the same seed, data shard, model, initial weights and hyper-parameters;
only the kvstore (and its compression and sync mode) differ. Rank 0 evaluates every
``eval_every`` iterations (and after the last) — test accuracy, or validation loss for the
language model; the time it spends evaluating is left out of its clock, so a curve point is
(training seconds since the first iteration, quality, iteration). Each iteration also
records how long this worker computed: forward and backward, and under netstorm's
local-update modes (hfa, esync, diloco) its own optimizer step, timed until it is done but
not the synchronization it may start (``kv.wait_inner_steps()``); under the fully
synchronous modes the optimizer runs on the servers. The rest of an iteration is
synchronization. Every rank records its measured window (after the warm-up
iteration) and rank 0 its evaluation pauses on ``time.monotonic()``, one clock for every
process of the host, so that the pauses can be taken out of every rank's wall time
(netstorm.bench.accuracy).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from .tasks import prepare
from .workloads import METRICS, WORKLOADS

__all__ = ["OPTIMIZERS", "chaos_step", "gradient_bytes", "model_bytes", "optimizer_params",
           "push_then_pull", "resume", "train"]

OPTIMIZERS = ("sgd", "adam", "dcasgd")


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


def optimizer_params(args) -> dict:
    """gluon.Trainer's optimizer_params: the learning rate, ``wd`` when set, and for SGD and
    DCASGD the momentum (none under DGC momentum correction, which applies it inside
    compression: the servers refuse an optimizer that has its own). Adam keeps MXNet's
    betas (0.9, 0.999) and epsilon (1e-8); its ``wd`` is an L2 term added to the gradient
    (MXNet 1.9.1 has no decoupled AdamW)."""
    params = {"learning_rate": args.lr}
    if getattr(args, "wd", 0.0):
        params["wd"] = args.wd
    if args.optimizer in ("sgd", "dcasgd"):
        dgc = bool((args.compression or {}).get("momentum"))
        params["momentum"] = 0.0 if dgc else args.momentum
    return params


def _describe(metric, value: float) -> str:
    if metric.name == "loss":
        return f"{metric.label.split(' (')[0]} {value:.4f} (perplexity " \
               f"{math.exp(min(value, 700)):.1f})"
    return f"{metric.label} {value:.4f}"


def train(kv, args) -> tuple:
    """Run ``args.iters`` iterations; returns (per-iteration seconds, checks dict, which
    includes the model's gradient bytes)."""
    task = prepare(args, kv.rank, kv.num_workers)
    metric = METRICS[WORKLOADS[args.workload].metric]
    net = task.net
    if args.compression and isinstance(kv, mx.kvstore.KVStore):     # stock MXNet
        push_then_pull(kv)
    trainer = gluon.Trainer(net.collect_params(), args.optimizer, optimizer_params(args),
                            kvstore=kv, compression_params=args.compression)
    # wait for these arrays only, never mx.nd.waitall(): that also waits for a streamed
    # fragment still on the WAN, which the worker is meant to compute through
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    times, compute, curve, pauses, starts = [], [], [], [], []
    clock, evaluating = time.perf_counter(), 0.0
    window = [None, None]
    skip = resume(kv, trainer, net, task, args)     # a restarted worker (bench --chaos)
    skipped = skipped_steps(kv, args, skip)
    for it in range(1, args.iters + 1):
        if it <= skip:
            continue
        if it == 2:
            window[0] = time.monotonic()        # the measured iterations start
        data, label = task.batch(it)
        start = time.perf_counter()
        starts.append(time.monotonic())
        with autograd.record():
            loss = task.loss_fn(net(data), label)
        loss.backward()
        for param in params:
            param.grad().wait_to_read()
        if args.extra_s:
            time.sleep(args.extra_s)          # a straggler: slower accelerators
        computed = time.perf_counter()
        trainer.step(args.batch_size)
        # under netstorm's local-update modes the worker's own optimizer step is compute
        # too: timed until it is done, apart from the synchronization it may have started
        inner = getattr(kv, "wait_inner_steps", None)
        stepping = time.perf_counter() - computed if inner is not None and inner() else 0.0
        for param in params:
            param.data().wait_to_read()
        ended = time.perf_counter()
        window[1] = time.monotonic()
        times.append(ended - start)
        compute.append(computed - start + stepping)
        chaos_step(kv, args, it, skipped)
        if kv.rank == 0 and (it % args.eval_every == 0 or it == args.iters):
            paused, paused_at = time.perf_counter(), time.monotonic()
            value = task.evaluate()
            wall = paused - clock - evaluating
            evaluating += time.perf_counter() - paused
            pauses.append([paused_at, time.monotonic()])
            curve.append([round(wall, 3), round(value, 4), it])
            print(f"iter {it}/{args.iters} {times[-1]:.3f}s {_describe(metric, value)} "
                  f"at {wall:.1f}s", flush=True)
    digest = hashlib.sha256()       # in the model's order: its names depend on what the
    for param in net.collect_params().values():     # process built before (dense9, dense10)
        digest.update(param.data().asnumpy().tobytes())
    return times, {"weights_sha256": digest.hexdigest(), "compute_s": compute,
                   "model_bytes": gradient_bytes(net), "metric": metric.name, "curve": curve,
                   "batch_size": args.batch_size,
                   "window_monotonic": window if window[0] is not None else None,
                   "eval_monotonic": pauses, "iter_start_monotonic": starts,
                   "resumed_after": skip, "last_step": args.iters,
                   "skipped_steps": skipped, **task.info}


def resume(kv, trainer, net, task, args) -> int:
    """The steps a worker restarted into its rank (or a cluster restarted from a
    checkpoint) skips, ``kv.resumed_step`` (its rank's rounds x the steps per round under
    diloco and hfa; 0 otherwise); for a restarted one, first the cluster's current weights
    (MXNet 1.9.1's Trainer would pull them only inside its first step, after computing a
    gradient on its own), as examples/train_gluon.py does."""
    skip = int(getattr(kv, "resumed_step", getattr(kv, "resumed_round", 0)) or 0)
    if skip:
        net(task.batch(skip + 1)[0])            # finish deferred initialization
        trainer._optimizer.rescale_grad = 1.0 / args.batch_size
        trainer._init_kvstore()
        trainer._init_params()
        print(f"rank {kv.rank} resumes after step {skip}", flush=True)
    return skip


def _ledger(kv, args) -> str:
    """bench --chaos: where a rank keeps its progress across its processes."""
    return os.path.join(args.out, f"rank{kv.rank}.progress")


def skipped_steps(kv, args, skip: int) -> int:
    """bench --chaos: the steps of this rank whose update is not in the model, for a
    process that resumes after step ``skip``: those its earlier processes skipped, and
    those between the last synchronization its previous process completed and ``skip``
    (its DC left the run and rejoined: the rounds it was away, and the one in flight when
    it left; a worker restarted into its rank skips none). O(1)."""
    if not getattr(args, "step_lines", False):
        return 0
    try:
        with open(_ledger(kv, args)) as f:
            before = json.load(f)
        last, skipped = int(before["last"]), int(before["skipped"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    rounds = int(getattr(kv, "resumed_round", 0) or 0)
    period = max(1, skip // rounds) if rounds else 1        # steps per synchronization
    return skipped + max(0, skip - last // period * period)


def chaos_step(kv, args, it: int, skipped: int = 0) -> None:
    """bench --chaos: every rank notes its last step and the steps it skipped (its ledger,
    for :func:`skipped_steps`); rank 0 says when each step ended (``step N t=UNIX``, read
    by netstorm.bench.chaos_run) and writes the cluster's checkpoint every
    ``args.checkpoint_every`` steps (``[recovery] checkpoint``: a lost scheduler or server
    restarts the cluster from it). Nothing without those flags."""
    if getattr(args, "step_lines", False):
        ledger = _ledger(kv, args)
        with open(ledger + ".new", "w") as f:
            json.dump({"last": it, "skipped": skipped}, f)
        os.replace(ledger + ".new", ledger)
    if kv.rank != 0:
        return
    if getattr(args, "step_lines", False):
        print(f"step {it} t={time.time():.3f}", flush=True)
    every = getattr(args, "checkpoint_every", 0)
    if every and it % every == 0 and it < args.iters:
        kv.save_checkpoint()


def gradient_bytes(net) -> int:
    """The bytes of fp32 gradients one iteration synchronizes (what dense systems move)."""
    return sum(4 * int(np.prod(p.shape)) for p in net.collect_params().values()
               if p.grad_req != "null")


def model_bytes(args) -> int:
    """:func:`gradient_bytes` of the model of ``args.workload`` with ``args``' settings (for
    the bench process, before any worker runs; for ``lm`` this also builds the corpus'
    cache that the workers then read)."""
    return gradient_bytes(prepare(args, 0, 1).net)
