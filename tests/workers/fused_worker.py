"""Worker script for tests/cluster/test_worker_client.py: 96 small keys and a large one, all
pushpulled at once (as a Trainer step does), then pushed and pulled apart, then pushed
twice before a pull; exact dist_sync sums throughout. The small keys' requests wait in the
worker's outbox and travel in BATCHes (batch.py); prints how many. Exits non-zero on a
mismatch."""
import sys

import mxnet as mx
import numpy as np

import netstorm  # noqa: F401  registers 'netstorm'

kv = mx.kv.create("netstorm")
N, R = kv.num_workers, kv.rank
TOTAL = N * (N + 1) / 2            # sum over ranks of (rank + 1)
SHAPES = {k: (3, k % 5 + 1) for k in range(96)}
SHAPES[96] = (300, 100)            # 120 000 bytes: alone, through shared memory


def check(name, got, want):
    got = got.asnumpy()
    if not np.array_equal(got, np.broadcast_to(np.float32(want), got.shape)):
        print(f"check {name} FAILED: got {got.ravel()[:4]}, want {want}", flush=True)
        sys.exit(1)


for key, shape in SHAPES.items():
    kv.init(key, mx.nd.full(shape, 7))
for step in range(1, 6):
    grads = {k: mx.nd.full(s, (R + 1) * step * (k + 1)) for k, s in SHAPES.items()}
    for key in SHAPES:
        kv.pushpull(key, grads[key], priority=-key)
    for key in SHAPES:
        check(f"pushpull {key} step {step}", grads[key], TOTAL * step * (key + 1))
    for key, shape in SHAPES.items():
        kv.push(key, mx.nd.full(shape, (R + 1) * key))
    outs = {k: mx.nd.zeros(s) for k, s in SHAPES.items()}
    for key in SHAPES:
        kv.pull(key, out=outs[key])
    for key in SHAPES:
        check(f"push+pull {key} step {step}", outs[key], TOTAL * key)
    for key, shape in SHAPES.items():
        kv.push(key, mx.nd.full(shape, R + 1))
        kv.push(key, mx.nd.full(shape, (R + 1) * 3))
    for key in SHAPES:
        kv.pull(key, out=outs[key])
    for key in SHAPES:
        check(f"two pushes {key} step {step}", outs[key], TOTAL * 3)
mx.nd.waitall()
box = kv._client.outbox
print(f"worker {R}: {box.fused} requests in {box.batches} batches", flush=True)
kv.barrier() if hasattr(kv, "barrier") else kv._barrier()
print(f"worker {R} all checks passed", flush=True)
