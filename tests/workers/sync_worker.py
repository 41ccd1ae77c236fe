"""Worker script for the sync modes' live tests (tests/cluster/test_sync.py): trainer_worker's model
and batches under any [sync] mode, optionally with one DC's workers slower.

    sync_worker.py OUT_DIR [--steps S] [--wd WD] [--optimizer sgd|dcasgd]
                   [--lr LR] [--momentum M] [--slow-dc DC --slow-s SECONDS] [--digests]
                   [--mark-at STEP PATH] [--pause S]

Prints ``rank R step S`` every 10 steps and ``rank R done: S steps in N rounds`` at the end
(rounds: the synchronizations of key 0 under hfa/esync/diloco); saves its weights as
rankR.params. ``--digests``: after every step that synchronized every key (diloco without
fragments: every h-th), prints ``rank R round N weights SHA256`` of all its weights.
``--mark-at``: rank 0 creates PATH once step STEP is done (a test's cue); ``--pause``:
seconds slept after every step.
"""
import hashlib
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
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--digests", action="store_true")
    p.add_argument("--mark-at", nargs=2, default=(0, ""))
    p.add_argument("--pause", type=float, default=0.0)
    args = p.parse_args()
    ctxs = [mx.cpu(0)]
    net = tw.build_net(ctxs)
    params = {"learning_rate": args.lr, "wd": args.wd}
    if args.optimizer == "sgd":
        params["momentum"] = args.momentum
    trainer = gluon.Trainer(net.collect_params(), args.optimizer, params, kvstore="netstorm")
    rank = tw.trainer_rank(trainer)
    kv = trainer._kvstore
    for step in range(args.steps):
        if kv.dc == args.slow_dc:
            time.sleep(args.slow_s)
        tw.train_step(net, trainer, ctxs, *tw.batches(rank, step))
        if step % 10 == 9:
            print(f"rank {rank} step {step + 1}", flush=True)
        if rank == 0 and step + 1 == int(args.mark_at[0]):
            open(args.mark_at[1], "w").close()
        time.sleep(args.pause)
        if args.digests and kv._local is not None:
            rounds = {local.rounds for local in kv._local.keys.values()}
            steps = {local.synced_at for local in kv._local.keys.values()}
            if steps == {step + 1} and len(rounds) == 1:
                digest = hashlib.sha256()
                for param in net.collect_params().values():
                    digest.update(param.data().asnumpy().tobytes())
                print(f"rank {rank} round {rounds.pop()} weights {digest.hexdigest()}",
                      flush=True)
    mx.nd.waitall()
    net.save_parameters(os.path.join(args.out, f"rank{rank}.params"))
    local = kv._local.keys[0].rounds if kv._local is not None else args.steps
    print(f"rank {rank} done: {args.steps} steps in {local} rounds", flush=True)


if __name__ == "__main__":
    main()
