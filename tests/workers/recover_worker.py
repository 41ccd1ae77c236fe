"""Worker script for tests/test_recovery.py: rounds of known gradients on two keys under an
SGD optimizer with momentum, restartable (it goes on after ``kv.resumed_round``).

    recover_worker.py ROUNDS OUT_DIR [KILL_RANK KILL_ROUND]

Rank KILL_RANK's first process SIGKILLs itself in round KILL_ROUND, after pushing key 0 and
before key 1 (a step half sent). Every worker writes its final weights to
OUT_DIR/rank{R}.npz.
"""
import os
import signal
import sys
import time

import mxnet as mx
import numpy as np

from recover_values import OPTIMIZER, SHAPES, gradient

rounds, out_dir = int(sys.argv[1]), sys.argv[2]
kill_rank, kill_round = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (-1, 0)

kv = mx.kv.create("netstorm")
R = kv.rank
for key, shape in SHAPES.items():
    kv.init(key, mx.nd.ones(shape))
kv.set_optimizer(mx.optimizer.create("sgd", **OPTIMIZER))
start = kv.resumed_round
print(f"rank {R} starts after round {start}", flush=True)
weights = {key: mx.nd.zeros(shape) for key, shape in SHAPES.items()}
for rnd in range(start + 1, rounds + 1):
    for key in SHAPES:
        kv.push(key, mx.nd.array(gradient(key, rnd, R)))
        if R == kill_rank and rnd == kill_round and start == 0 and key == 0:
            time.sleep(0.5)                 # the push leaves, then the process dies
            os.kill(os.getpid(), signal.SIGKILL)
        kv.pull(key, out=weights[key])
    weights[1].wait_to_read()
np.savez(os.path.join(out_dir, f"rank{R}.npz"), **{str(k): w.asnumpy() for k, w in
                                                   weights.items()})
print(f"rank {R} done", flush=True)
