"""Worker script for the quorum rounds' live test (tests/cluster/test_quorum.py): known
gradients under hfa or diloco, one DC's workers late once.

    quorum_worker.py STEPS [--slow-dc DC --slow-step S --slow-s SECONDS] [--slow-every K]
                     [--step-s SECONDS]

Plain SGD at learning rate 1 on one key of three float32 zeros: the gradient of step ``s``
on rank ``r`` is ``r + 1 + s`` everywhere, so each synchronization's delta is known to the
test. Prints ``rank R dc D`` at the start and ``rank R final V DIGEST`` at the end (the
weights after the last synchronization, as a list, and the SHA-256 of their bytes) and the
seconds its steps took. ``--slow-every K``: the slow DC sleeps before every step ``s`` with
``s % K == S`` instead of once (a DC that stalls now and then; docs/sync.md#quorum-rounds-not-waiting-for-a-late-dc-hfa-diloco);
``--step-s``: every step sleeps that long first (compute, emulated).
"""
import argparse
import hashlib
import time

import mxnet as mx

import netstorm  # noqa: F401  registers 'netstorm'


def main():
    p = argparse.ArgumentParser()
    p.add_argument("steps", type=int)
    p.add_argument("--slow-dc", default="")
    p.add_argument("--slow-step", type=int, default=-1)
    p.add_argument("--slow-s", type=float, default=0.0)
    p.add_argument("--slow-every", type=int, default=0)
    p.add_argument("--step-s", type=float, default=0.0)
    args = p.parse_args()
    kv = mx.kv.create("netstorm")
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=1.0, momentum=0.0, wd=0.0,
                                      rescale_grad=1.0))
    print(f"rank {kv.rank} dc {kv.dc}", flush=True)
    kv.init(0, mx.nd.zeros((3,)))
    out = mx.nd.zeros((3,))
    kv.pull(0, out=out)
    start = time.monotonic()
    for step in range(args.steps):
        due = step % args.slow_every if args.slow_every else step
        if kv.dc == args.slow_dc and due == args.slow_step:
            time.sleep(args.slow_s)
        time.sleep(args.step_s)         # compute, emulated
        kv.push(0, mx.nd.full((3,), kv.rank + 1 + step))
        kv.pull(0, out=out)
    value = out.asnumpy()
    digest = hashlib.sha256(value.tobytes()).hexdigest()
    print(f"rank {kv.rank} final {value.tolist()} {digest} in "
          f"{time.monotonic() - start:.2f} s", flush=True)


if __name__ == "__main__":
    main()
