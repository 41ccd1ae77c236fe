"""Worker script for tests/cluster/test_status_page.py: trains ROUNDS exact-sum rounds of a
1 MB key, says so, then holds still (the cluster idle, its status steady) until the test
says go, and finishes.

    status_worker.py DIR ROUNDS

After its last round it writes ``DIR/paused-RANK``; it waits for ``DIR/go`` (at most
``WAIT_S``: a test that never says go fails with exit code 3), then ends cleanly.
"""
import importlib
import sys
import time
from pathlib import Path

import mxnet as mx

importlib.import_module("netstorm")         # registers the 'netstorm' kvstore

SHAPE = (512, 512)      # 1 MiB of float32: several WAN chunks per round, rates measured
WAIT_S = 90.0

out_dir, rounds = Path(sys.argv[1]), int(sys.argv[2])
kv = mx.kv.create("netstorm")
rank = kv.rank
kv.init(0, mx.nd.zeros(SHAPE))
total = kv.num_workers * (kv.num_workers + 1) / 2
out = mx.nd.zeros(SHAPE)
for r in range(1, rounds + 1):
    kv.pushpull(0, mx.nd.full(SHAPE, (rank + 1) * r), out=out)
    got = out.asnumpy()
    if not (got == total * r).all():
        sys.exit(f"rank {rank} round {r}: got {got.ravel()[:3]}, want {total * r}")
(out_dir / f"paused-{rank}").write_text(str(rounds))
deadline = time.monotonic() + WAIT_S
while not (out_dir / "go").exists():
    if time.monotonic() > deadline:
        print(f"rank {rank}: the test never wrote {out_dir / 'go'}", flush=True)
        sys.exit(3)
    time.sleep(0.05)
print(f"rank {rank} finished {rounds} rounds, every sum exact", flush=True)
