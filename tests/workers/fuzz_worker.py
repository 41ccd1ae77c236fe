"""Worker script for tests/cluster/test_fuzz.py: an exact-sum pushpull loop that tells the test where
to aim its fuzzer and runs until the test says at which round to stop.

    fuzz_worker.py DIR

After ``kv.init`` and a few rounds it writes ``DIR/worker-RANK.json``: its pid, its own
ROUTER address (the worker port), its server's and the scheduler's addresses, the node
table and its DC's key (the fuzzer is an insider: it holds dc0's key). Every round it checks the sum is exact, records the round in ``DIR/progress-RANK``
and reads ``DIR/stop`` (a round number the test writes once, atomically; both workers stop
at that same round). A watchdog exits with code 3 the moment the client's I/O thread dies
(a message that kills it would otherwise only show as a timeout much later).
"""
import importlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import mxnet as mx

importlib.import_module("netstorm")         # registers the 'netstorm' kvstore

SHAPE = (64, 33)
READY_AFTER = 3          # rounds before the worker says where it is
MAX_ROUNDS = 20000       # the test never said stop: give up (the launch timeout is shorter)

out_dir = Path(sys.argv[1])
kv = mx.kv.create("netstorm")
client = kv._client
rank = kv.rank


def write(name: str, text: str) -> None:
    tmp = out_dir / f".{name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, out_dir / name)


def watchdog() -> None:
    while True:
        if not client._thread.is_alive() and not client._closed.is_set():
            print(f"rank {rank}: the netstorm I/O thread died (its traceback is above)",
                  flush=True)
            os._exit(3)
        time.sleep(0.05)


threading.Thread(target=watchdog, daemon=True).start()
kv.init(0, mx.nd.zeros(SHAPE))
total = kv.num_workers * (kv.num_workers + 1) / 2
out = mx.nd.zeros(SHAPE)
stop = MAX_ROUNDS
r = 0
while r < stop:
    r += 1
    kv.pushpull(0, mx.nd.full(SHAPE, (rank + 1) * r), out=out)
    got = out.asnumpy()
    if not (got == total * r).all():
        sys.exit(f"rank {rank} round {r}: got {got.ravel()[:3]}, want {total * r}")
    write(f"progress-{rank}", str(r))
    if r == READY_AFTER:
        write(f"worker-{rank}.json", json.dumps({
            "rank": rank, "pid": os.getpid(), "address": client.van.address,
            "server": client.server.address, "scheduler": client.settings.scheduler,
            "nodes": client.po.table.to_json(), "key_file": client.settings.key_file,
            "scheduler_key": client.settings.scheduler_key}))
    if (out_dir / "stop").exists():
        stop = int((out_dir / "stop").read_text())
    time.sleep(0.02)
if r >= MAX_ROUNDS:
    sys.exit(f"rank {rank}: the test never wrote {out_dir / 'stop'}")
print(f"rank {rank} finished {r} rounds, every sum exact", flush=True)
