"""Worker script: gluon.Trainer on kvstore='netstorm'; saves its final weights for comparison.

    trainer_worker.py OUT_DIR --update-on-kvstore true|false [--devices K] [--steps S]

Every rank trains on its own deterministic batches (see batches()); the test replays all
ranks' batches in one process and compares weights. With --check-states it also saves
optimizer states mid-run, restores them and checks the replayed steps match exactly.
"""
import argparse
import os

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from netstorm.kvstore import NetStorm

BATCH, FEATURES, CLASSES = 8, 12, 5


def build_net(ctx):
    mx.random.seed(7)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu", in_units=FEATURES),
            gluon.nn.Dense(CLASSES, in_units=16))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


def batches(rank, step):
    rng = np.random.RandomState(1000 * step + rank)
    return rng.randn(BATCH, FEATURES).astype("float32"), rng.randint(0, CLASSES, BATCH)


def optimizer_params(wd=1e-3):
    return {"learning_rate": 0.1, "momentum": 0.9, "wd": wd}


def train_step(net, trainer, ctxs, x, y):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    xs = gluon.utils.split_and_load(x, ctxs)
    ys = gluon.utils.split_and_load(y.astype("float32"), ctxs)
    with autograd.record():
        losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
    for loss in losses:
        loss.backward()
    trainer.step(BATCH)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--update-on-kvstore", choices=["true", "false"], required=True)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--check-states", action="store_true")
    p.add_argument("--wd", type=float, default=1e-3)
    args = p.parse_args()
    ctxs = [mx.cpu(i) for i in range(args.devices)]
    net = build_net(ctxs)
    trainer = gluon.Trainer(net.collect_params(), "sgd", optimizer_params(args.wd),
                            kvstore="netstorm",
                            update_on_kvstore=args.update_on_kvstore == "true")
    rank = trainer_rank(trainer)
    kv = trainer._kvstore
    assert isinstance(kv, NetStorm), type(kv)   # the string 'netstorm' was honoured
    assert trainer._update_on_kvstore == (args.update_on_kvstore == "true")
    for step in range(args.steps):
        train_step(net, trainer, ctxs, *batches(rank, step))
    net.save_parameters(os.path.join(args.out, f"rank{rank}.params"))
    if args.check_states:
        check_states(net, trainer, kv, ctxs, args)
    print(f"rank {rank} done", flush=True)


def trainer_rank(trainer):
    """The rank, creating the Trainer's kvstore on first use like Trainer.step would."""
    if not trainer._kv_initialized:
        trainer._optimizer.rescale_grad = 1.0 / BATCH   # what step(BATCH) sets before init
        trainer._init_kvstore()
    return trainer._kvstore.rank


def check_states(net, trainer, kv, ctxs, args):
    base = os.path.join(args.out, f"ckpt{kv.rank}")
    trainer.save_states(base + ".states")
    saved = {k: v.data(ctxs[0]).copy() for k, v in net.collect_params().items()}
    for step in range(args.steps, args.steps + 2):
        train_step(net, trainer, ctxs, *batches(kv.rank, step))
    after = {k: v.data(ctxs[0]).asnumpy() for k, v in net.collect_params().items()}
    # rewind: weights (also on the servers' replicas) and optimizer states. Weights are set
    # in place: load_parameters would reset the Trainer's kvstore, which MXNet forbids for
    # distributed stores (dist_sync alike).
    for k, v in net.collect_params().items():
        for arr in v.list_data():
            arr[:] = saved[k]
    if trainer._update_on_kvstore:
        for i, param in enumerate(trainer._params):
            kv.broadcast(i, param.data(ctxs[0]), out=param.list_data())
    trainer.load_states(base + ".states")
    for step in range(args.steps, args.steps + 2):
        train_step(net, trainer, ctxs, *batches(kv.rank, step))
    for k, v in net.collect_params().items():
        if not np.array_equal(v.data(ctxs[0]).asnumpy(), after[k]):
            raise SystemExit(f"states check FAILED for {k}")
    print(f"rank {kv.rank} states check ok", flush=True)


if __name__ == "__main__":
    main()
