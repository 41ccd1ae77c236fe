"""Worker script for tests/cluster/test_metrics.py: ROUNDS pushpulls of one key of
ELEMENTS float32, each after STEP_S of "compute" (a sleep), so that the cluster runs long
enough to be scraped and every round is judged by the scheduler.

    metrics_worker.py ROUNDS STEP_S ELEMENTS
"""
import sys
import time

import mxnet as mx

import netstorm  # noqa: F401

rounds, step_s, elements = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
kv = mx.kv.create("netstorm")
kv.init(0, mx.nd.zeros((elements,)))
grad, out = mx.nd.ones((elements,)), mx.nd.zeros((elements,))
for _ in range(rounds):
    time.sleep(step_s)
    kv.pushpull(0, grad, out=out)
    out.wait_to_read()
expected = float(kv.num_workers)
assert abs(out.asnumpy()[0] - expected) < 1e-6, (out.asnumpy()[0], expected)
print(f"rank {kv.rank} done", flush=True)
