"""Worker script for the sync modes' live tests (tests/cluster/test_sync.py): trainer_worker's model
and batches under any [sync] mode, optionally with one DC's workers slower.

    sync_worker.py OUT_DIR [--steps S] [--wd WD] [--optimizer sgd|dcasgd]
                   [--slow-dc DC --slow-s SECONDS]

Prints ``rank R step S`` every 10 steps and ``rank R done: S steps in N rounds`` at the end
(rounds: the synchronizations of key 0 under hfa/esync); saves its weights as rankR.params.
"""
import argparse
import os
import time

import mxnet as mx
from mxnet import gluon

import trainer_worker as tw


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--wd", type=float, default=0.0)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--slow-dc", default="")
    p.add_argument("--slow-s", type=float, default=0.0)
    args = p.parse_args()
    ctxs = [mx.cpu(0)]
    net = tw.build_net(ctxs)
    params = {"learning_rate": 0.1, "wd": args.wd}
    if args.optimizer == "sgd":
        params["momentum"] = 0.9
    trainer = gluon.Trainer(net.collect_params(), args.optimizer, params, kvstore="netstorm")
    rank = tw.trainer_rank(trainer)
    kv = trainer._kvstore
    for step in range(args.steps):
        if kv.dc == args.slow_dc:
            time.sleep(args.slow_s)
        tw.train_step(net, trainer, ctxs, *tw.batches(rank, step))
        if step % 10 == 9:
            print(f"rank {rank} step {step + 1}", flush=True)
    mx.nd.waitall()
    net.save_parameters(os.path.join(args.out, f"rank{rank}.params"))
    local = kv._local.keys[0].rounds if kv._local is not None else args.steps
    print(f"rank {rank} done: {args.steps} steps in {local} rounds", flush=True)


if __name__ == "__main__":
    main()
