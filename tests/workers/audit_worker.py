"""Worker script for tests/cluster/test_replica_audit.py: rounds of known gradients on two keys
under the servers' SGD optimizer (tests/workers/recover_values.py); one rank may set its DC's
optimizer with another learning rate, which makes that DC's replica diverge.

    audit_worker.py ROUNDS OUT_DIR [--odd-rank R --odd-lr LR] [--pause S]

Every worker writes its final weights to OUT_DIR/rank{R}.npz.
"""
import argparse
import os
import time

import mxnet as mx
import numpy as np

from recover_values import OPTIMIZER, SHAPES, gradient

parser = argparse.ArgumentParser()
parser.add_argument("rounds", type=int)
parser.add_argument("out_dir")
parser.add_argument("--odd-rank", type=int, default=-1)
parser.add_argument("--odd-lr", type=float, default=0.0)
parser.add_argument("--pause", type=float, default=0.0, help="seconds per round")
args = parser.parse_args()

kv = mx.kv.create("netstorm")
R = kv.rank
for key, shape in SHAPES.items():
    kv.init(key, mx.nd.ones(shape))
settings = dict(OPTIMIZER, learning_rate=args.odd_lr) if R == args.odd_rank else OPTIMIZER
kv.set_optimizer(mx.optimizer.create("sgd", **settings))
weights = {key: mx.nd.zeros(shape) for key, shape in SHAPES.items()}
for rnd in range(1, args.rounds + 1):
    for key in SHAPES:
        kv.push(key, mx.nd.array(gradient(key, rnd, R)))
        kv.pull(key, out=weights[key])
    weights[1].wait_to_read()
    time.sleep(args.pause)
np.savez(os.path.join(args.out_dir, f"rank{R}.npz"), **{str(k): w.asnumpy() for k, w in
                                                        weights.items()})
print(f"rank {R} done", flush=True)
