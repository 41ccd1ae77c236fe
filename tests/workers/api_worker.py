"""Worker script for tests/cluster/test_netstorm.py: every kvstore method against dist_sync semantics.

Run under scripts/launch.py; exits non-zero (with the failing check) on any mismatch.
"""
import json
import sys

import mxnet as mx
import numpy as np

import netstorm  # noqa: F401  registers 'netstorm'
from netstorm.geoserver.worker.client import KVStoreError

kv = mx.kv.create("netstorm")
# the compression the cluster runs with (argv[1], JSON): its sums stay exact on the small
# integers checked here (fp16 holds them exactly; error feedback keeps nothing)
IN_FORCE = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"type": "none"}
N, R = kv.num_workers, kv.rank
TOTAL = N * (N + 1) / 2            # sum over ranks of (rank + 1)


def check(name, got, want):
    got = got.asnumpy() if hasattr(got, "asnumpy") else np.asarray(got)
    if not np.array_equal(got, np.broadcast_to(want, got.shape)):
        print(f"check {name} FAILED: got {got.ravel()[:6]}, want {np.ravel(want)[:6]}",
              flush=True)
        sys.exit(1)
    print(f"check {name} ok", flush=True)


def expect_error(name, exc_type, fn, text):
    try:
        fn()
    except exc_type as exc:
        if text not in str(exc):
            print(f"check {name} FAILED: error {exc!r} lacks {text!r}", flush=True)
            sys.exit(1)
        print(f"check {name} ok ({exc})", flush=True)
        return
    print(f"check {name} FAILED: no {exc_type.__name__}", flush=True)
    sys.exit(1)


assert kv.type == "dist_sync_netstorm" and "dist" in kv.type and "_sync" in kv.type
assert kv.is_capable("optimizer") and not kv.is_capable("other")
assert 0 <= kv.local_rank < N and 0 <= R < N
print(f"rank {R} of {N}, local rank {kv.local_rank}", flush=True)

# init: rank 0's value wins; pull returns it into every out
shape = (4, 3)
kv.init(0, mx.nd.full(shape, 100 + R))
outs = [mx.nd.zeros(shape), mx.nd.zeros(shape)]
kv.pull(0, out=outs)
check("init+pull", outs[0], 100)
check("pull into list", outs[1], 100)

# push then pull: the value becomes the sum over workers (no optimizer set)
kv.push(0, mx.nd.full(shape, R + 1))
kv.pull(0, out=outs[0])
check("push+pull", outs[0], TOTAL)

# push of a device list: values are summed locally first
kv.push(0, [mx.nd.full(shape, R + 1, ctx=mx.cpu(0)), mx.nd.full(shape, 1, ctx=mx.cpu(1))])
kv.pull(0, out=outs[0])
check("push device list", outs[0], TOTAL + N)

# pushpull into out, repeated rounds with changing values
for rnd in range(1, 6):
    out = mx.nd.zeros(shape)
    kv.pushpull(0, mx.nd.full(shape, (R + 1) * rnd), out=out)
    check(f"pushpull round {rnd}", out, TOTAL * rnd)

# pushpull in place (out=None), list of devices
vals = [mx.nd.full(shape, R + 1), mx.nd.full(shape, 2 * (R + 1))]
kv.pushpull(0, vals)
check("pushpull in place [0]", vals[0], 3 * TOTAL)
check("pushpull in place [1]", vals[1], 3 * TOTAL)

# pushpull in place with one array: the operator's output aliases its input
single = mx.nd.full(shape, R + 1)
kv.pushpull(0, single)
check("pushpull in place, one array", single, TOTAL)
kv.pushpull(0, [single])
check("pushpull in place, list of one", single, N * TOTAL)

# lists of keys
kv.init([1, 2], [mx.nd.zeros((5,)), mx.nd.zeros((2, 2))])
o1, o2 = mx.nd.zeros((5,)), mx.nd.zeros((2, 2))
kv.pushpull([1, 2], [[mx.nd.ones((5,))], [mx.nd.full((2, 2), R)]], out=[[o1], [o2]])
check("key list [1]", o1, N)
check("key list [2]", o2, N * (N - 1) / 2)

# a key much larger than the chunk size (the launcher sets a small chunk)
big = np.arange(257 * 1031, dtype=np.float32).reshape(257, 1031)
kv.init(3, mx.nd.array(big))
out = mx.nd.zeros(big.shape)
kv.pushpull(3, mx.nd.array(big * (R + 1)), out=out)
check("large key", out, big * TOTAL)
kv.pushpull(3, mx.nd.array(big), out=out)
check("large key round 2", out, big * N)

# small integers over several chunks: what a compressing cluster (fp16) carries exactly
small = (np.arange(40_000) % 97).astype(np.float32)
kv.init(21, mx.nd.zeros(small.shape))
out = mx.nd.zeros(small.shape)
for rnd in (1, 2):
    kv.pushpull(21, mx.nd.array(small * (R + 1)), out=out)
    check(f"small-integer key round {rnd}", out, small * TOTAL)

# fp16
h = mx.nd.full((33, 7), 0.5, dtype="float16")
kv.init(4, h)
out = mx.nd.zeros((33, 7), dtype="float16")
kv.pushpull(4, mx.nd.full((33, 7), R + 1, dtype="float16"), out=out)
assert out.dtype == np.float16
check("fp16 pushpull", out, np.float16(TOTAL))

# broadcast: rank 0's value lands in every out
bouts = [mx.nd.zeros((6,)), mx.nd.zeros((6,))]
kv.broadcast(5, mx.nd.full((6,), 7 + R), out=bouts)
check("broadcast", bouts[1], 7)

# a one-element key
kv.init(7, mx.nd.array([3.0]))
s = mx.nd.zeros((1,))
kv.pushpull(7, mx.nd.array([R + 1.0]), out=s)
check("one-element key", s, TOTAL)

# row_sparse: each worker's gradient touches its own row (and row 0); the value becomes
# the sum (no optimizer set), read back as chosen rows (any order, repeats) or dense
rows = max(4, N)
kv.init(30, mx.nd.ones((rows, 2)).tostype("row_sparse"))
grad = mx.nd.zeros((rows, 2))
grad[R] = R + 1
grad[0] += 1
kv.push(30, grad.tostype("row_sparse"))
want = np.zeros((rows, 2), np.float32)
want[:N] += (np.arange(N) + 1)[:, None]
want[0] += N
picked = mx.nd.sparse.zeros("row_sparse", (rows, 2))
kv.row_sparse_pull(30, out=picked, row_ids=mx.nd.array([rows - 1, 0, 0]))
assert picked.stype == "row_sparse" and picked.indices.asnumpy().tolist() == [0, rows - 1]
check("row_sparse_pull rows", picked, np.where([[r in (0, rows - 1)] for r in range(rows)],
                                               want, 0))
dense = mx.nd.zeros((rows, 2))
kv.pull(30, out=dense)
check("row_sparse key pulled dense", dense, want)
kv.pull(30, out=picked)                 # a row_sparse out is skipped, as in dist_sync
expect_error("row_sparse out without ignore_sparse", mx.base.MXNetError,
             lambda: kv.pull(30, out=picked, ignore_sparse=False), "use row_sparse_pull")
wide = mx.nd.zeros((rows, 2), dtype="float64")
kv.pull(30, out=wide)                   # converted, as MXNet's pull does
check("pull converts the dtype", wide, want)

kv.barrier()
print("check barrier ok", flush=True)

# options and bad input: clear errors, nothing lost
kv.set_gradient_compression(IN_FORCE)        # the cluster's own setting is accepted
other = {"type": "2bit"} if IN_FORCE["type"] != "2bit" else {"type": "fp16"}
expect_error("another compression", ValueError,
             lambda: kv.set_gradient_compression(other), "in force cluster-wide")
expect_error("unknown compression", ValueError,
             lambda: kv.set_gradient_compression({"type": "3bit"}), "accepted: ")
expect_error("pull of unknown key", mx.base.MXNetError,   # MXNet's own error type, and ours
             lambda: kv.pull(99, out=mx.nd.zeros((1,))), "not been initialized")
expect_error("init with other shape", KVStoreError,
             lambda: kv.init(0, mx.nd.zeros((2, 2))), "initialized as")
expect_error("str key on an int key's id", ValueError,
             lambda: kv.init("w", mx.nd.zeros((1,))), "would take id 0, which int key 0 has")
expect_error("push of wrong shape", ValueError,
             lambda: kv.push(0, mx.nd.zeros((3, 4))), "got an array of (3, 4)")
expect_error("row_sparse_pull into a dense out", ValueError,
             lambda: kv.row_sparse_pull(0, out=mx.nd.zeros(shape), row_ids=mx.nd.array([0])),
             "out must be row_sparse")
expect_error("row ids out of range", ValueError,
             lambda: kv.row_sparse_pull(30, out=picked, row_ids=mx.nd.array([rows])),
             "row ids must be in 0..")
expect_error("a Python updater", KVStoreError, lambda: kv._set_updater(lambda *a: None),
             "set_optimizer")
# the store still works after the rejected requests
out = mx.nd.zeros(shape)
kv.pushpull(0, mx.nd.full(shape, 1), out=out)
check("still works after errors", out, N)
kv.barrier()
print(f"worker {R} all checks passed", flush=True)
