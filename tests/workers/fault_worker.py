"""Worker script for fault tests: tests/cluster/test_launch.py, test_service.py, test_server.py.

    fault_worker.py MODE [ROUNDS [ELEMENTS]]

MODE: loop (pushpull ROUNDS rounds, checking sums), exit-rank1 (rank 1 exits with code 3
after init), sleep (init, then sleep), garbage (send malformed frames and messages from an
unknown peer to the server, then loop and check sums), die-rank1 (rank 1 SIGKILLs itself),
short-rank1 (like loop, but rank 1 stops cleanly two rounds early), stall-rank0 (rank 0
sleeps after init; the others wait inside MXNet's engine for round 1's value, which never
comes), stall-rank1 (the same with rank 1: a data loader deadlocked), hang-rank1 (like loop,
but rank 1 then sleeps forever, outside the kvstore, while the others finish).
"""
import os
import signal
import sys
import time

import mxnet as mx
import numpy as np
import zmq

import netstorm  # noqa: F401
from netstorm.geoserver.core import wire

mode = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
kv = mx.kv.create("netstorm")
shape = (int(sys.argv[3]),) if len(sys.argv) > 3 else (64, 33)
kv.init(0, mx.nd.zeros(shape))
print(f"rank {kv.rank} ready", flush=True)

if mode == "short-rank1" and kv.rank == 1:
    rounds -= 2
if mode == "exit-rank1" and kv.rank == 1:
    sys.exit(3)
if mode == "die-rank1" and kv.rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
stalled = int(mode.removeprefix("stall-rank")) if mode.startswith("stall-rank") else None
if mode == "sleep" or stalled == kv.rank:
    while True:
        time.sleep(1)
if mode == "garbage":     # from this DC's key: a stranger's would not get past the handshake
    sock = zmq.Context.instance().socket(zmq.DEALER)
    own = kv._client.van.credentials.own
    sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = \
        own.public, own.public, own.secret
    sock.connect(kv._client.server.address)
    good = wire.encode(wire.Message(wire.Kind.PULL, sender=kv._client.me.id, key=0))
    sock.send_multipart([b"garbage"])                                   # too few frames
    sock.send_multipart([b"x" * wire.HEADER.size, b""])                 # bad magic
    sock.send_multipart([good[0][:-1], b""])                            # short header
    sock.send_multipart([good[0], b"{not json"])                        # bad meta
    bad_kind = bytearray(good[0])
    bad_kind[3] = 250
    sock.send_multipart([bytes(bad_kind), b""])                         # unknown kind
    stranger = wire.encode(wire.Message(wire.Kind.PUSH, sender=4242, key=0, seq=1,
                                        dtype=np.float32, frames=[np.ones(5, np.float32)]))
    sock.send_multipart(stranger)                                       # unknown peer
    sock.send_multipart(wire.encode(wire.Message(                       # odd-sized frame
        wire.Kind.PUSH, sender=kv._client.me.id, key=0, seq=1, dtype=np.float32,
        frames=[b"abc"])))
    sock.close(linger=1000)
    print(f"rank {kv.rank} sent garbage", flush=True)

if stalled is not None:
    out = mx.nd.zeros(shape)
    kv.pushpull(0, mx.nd.ones(shape), out=out)
    print(f"rank {kv.rank} waiting in the engine", flush=True)
    out.asnumpy()       # the main thread waits in MXNet's C++ engine, not in Python
    sys.exit(f"rank {kv.rank}: round 1 ended, but rank {stalled} never pushed it")

total = kv.num_workers * (kv.num_workers + 1) / 2
out = mx.nd.zeros(shape)
for r in range(1, rounds + 1):
    kv.pushpull(0, mx.nd.full(shape, (kv.rank + 1) * r), out=out)
    got = out.asnumpy()
    if not (got == total * r).all():
        sys.exit(f"rank {kv.rank} round {r}: got {got.ravel()[:3]}, want {total * r}")
    print(f"rank {kv.rank} round {r} ok", flush=True)
    time.sleep(0.05)
print(f"rank {kv.rank} finished {rounds} rounds", flush=True)
if mode == "hang-rank1" and kv.rank == 1:
    while True:         # hung outside the kvstore: its I/O thread still beats
        time.sleep(1)
