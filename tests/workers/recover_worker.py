"""Worker script for tests/cluster/test_recovery.py: rounds of known gradients on two keys under an
SGD optimizer with momentum, restartable (it goes on after ``kv.resumed_step``: rounds under
fsa, inner steps under diloco and hfa, where a "round" below is one push, a local step).

    recover_worker.py ROUNDS OUT_DIR [--kill RANK ROUND] [--save-at ROUND PATH]
                      [--mark-at ROUND PATH ...] [--pause S] [--pushpull]
                      [--started-mark PATH] [--resumed-mark PATH] [--hold-at ROUND PATH]

With --kill, rank RANK's first process SIGKILLs itself in round ROUND, after pushing key 0
and before key 1 (a step half sent). With --save-at, rank 0 writes a checkpoint after that
round and goes on. Every worker writes its final weights to OUT_DIR/rank{R}.npz.
"""
import argparse
import os
import signal
import time

import mxnet as mx
import numpy as np

from recover_values import OPTIMIZER, SHAPES, gradient

parser = argparse.ArgumentParser()
parser.add_argument("rounds", type=int)
parser.add_argument("out_dir")
parser.add_argument("--kill", type=int, nargs=2, default=(-1, 0))
parser.add_argument("--save-at", nargs=2, default=(0, ""))
parser.add_argument("--save-every", type=int, default=0,
                    help="rank 0 saves to the cluster's [recovery] checkpoint this often")
parser.add_argument("--pause", type=float, default=0.0, help="seconds per round")
parser.add_argument("--pushpull", action="store_true", help="kv.pushpull, not push + pull")
parser.add_argument("--mark-at", nargs=2, action="append", default=[],
                    help="rank 0 creates PATH once round ROUND is done (a test's cue)")
parser.add_argument("--started-mark", default="",
                    help="every rank creates PATH.RANK once it knows its first round")
parser.add_argument("--resumed-mark", default="",
                    help="a rank that starts after round 1 or later (restarted, or its DC "
                         "rejoined) creates PATH.RANK")
parser.add_argument("--hold-at", nargs=2, default=(0, ""),
                    help="rank 0 waits after round ROUND until PATH exists (up to 120 s)")
args = parser.parse_args()
rounds, out_dir, (kill_rank, kill_round) = args.rounds, args.out_dir, args.kill
save_at, save_to = int(args.save_at[0]), args.save_at[1]

kv = mx.kv.create("netstorm")
R = kv.rank
for key, shape in SHAPES.items():
    kv.init(key, mx.nd.ones(shape))
kv.set_optimizer(mx.optimizer.create("sgd", **OPTIMIZER))
start = kv.resumed_step     # rounds under fsa; under diloco / hfa, steps (rounds x h / k1)
print(f"rank {R} starts after round {start}", flush=True)
if args.started_mark:
    open(f"{args.started_mark}.{R}", "w").close()
if args.resumed_mark and start > 0:
    open(f"{args.resumed_mark}.{R}", "w").close()
weights = {key: mx.nd.zeros(shape) for key, shape in SHAPES.items()}
for rnd in range(start + 1, rounds + 1):
    for key in SHAPES:
        if args.pushpull:
            kv.pushpull(key, mx.nd.array(gradient(key, rnd, R)), out=weights[key])
            continue
        kv.push(key, mx.nd.array(gradient(key, rnd, R)))
        if R == kill_rank and rnd == kill_round and start == 0 and key == 0:
            time.sleep(0.5)                 # the push leaves, then the process dies
            os.kill(os.getpid(), signal.SIGKILL)
        kv.pull(key, out=weights[key])
    weights[1].wait_to_read()
    if R == 0 and rnd == save_at:
        print(f"checkpoint of round {kv.save_checkpoint(save_to)} written", flush=True)
    if R == 0 and args.save_every and rnd % args.save_every == 0:
        print(f"checkpoint of round {kv.save_checkpoint()} written", flush=True)
    if R == 0 and rnd == int(args.hold_at[0]):
        waited = 0.0
        while not os.path.exists(args.hold_at[1]) and waited < 120:
            time.sleep(0.05)
            waited += 0.05
    for at, path in args.mark_at:
        if R == 0 and rnd == int(at):
            open(path, "w").close()
    time.sleep(args.pause)
np.savez(os.path.join(out_dir, f"rank{R}.npz"), **{str(k): w.asnumpy() for k, w in
                                                   weights.items()})
print(f"rank {R} done", flush=True)
