"""Worker script for tests/cluster/test_shared_slots.py: a large key (shared memory with the DC
server on this host) and a small one (frames), through pushpull, push + pull, two pushes
before a pull (the second finds the push slot busy and goes by frame) and a Trainer-like
loop; exact dist_sync sums throughout. Exits non-zero on a mismatch; prints how many
pushes and values of the large key went through shared memory."""
import sys

import mxnet as mx
import numpy as np

import netstorm  # noqa: F401  registers 'netstorm'

kv = mx.kv.create("netstorm")
N, R = kv.num_workers, kv.rank
TOTAL = N * (N + 1) / 2            # sum over ranks of (rank + 1)
BIG, SMALL = (200, 100), (4, 3)    # 80 000 and 48 bytes


def check(name, got, want):
    got = got.asnumpy()
    if not np.array_equal(got, np.broadcast_to(np.float32(want), got.shape)):
        print(f"check {name} FAILED: got {got.ravel()[:4]}, want {want}", flush=True)
        sys.exit(1)


for key, shape in ((0, BIG), (1, SMALL)):
    kv.init(key, mx.nd.full(shape, 7))
    out = mx.nd.zeros(shape)
    kv.pull(key, out=out)
    check(f"init {key}", out, 7)
for step in range(1, 6):
    for key, shape in ((0, BIG), (1, SMALL)):
        out = mx.nd.zeros(shape)
        kv.pushpull(key, mx.nd.full(shape, (R + 1) * step), out=out)
        check(f"pushpull {key} step {step}", out, TOTAL * step)
        kv.push(key, mx.nd.full(shape, (R + 1) * 2 * step))
        kv.pull(key, out=out)
        check(f"push+pull {key} step {step}", out, TOTAL * 2 * step)
        kv.push(key, mx.nd.full(shape, R + 1))
        kv.push(key, mx.nd.full(shape, (R + 1) * 3))      # slot busy: a frame
        kv.pull(key, out=out)
        check(f"two pushes {key} step {step}", out, TOTAL * 3)
mx.nd.waitall()
slots = kv._client.shares.slots
print(f"worker {R}: shared keys {sorted(slots)}; key 0: {slots[0].pushes} pushes and "
      f"{slots[0].values} values shared" if 0 in slots else f"worker {R}: shared keys []",
      flush=True)
kv.barrier() if hasattr(kv, "barrier") else kv._barrier()
print(f"worker {R} all checks passed", flush=True)
