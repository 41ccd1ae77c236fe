#!/usr/bin/env python3
"""Per-key synchronization overhead: a Trainer step's allreduce vs one buffer of equal bytes.

Run under the launcher (every worker runs it):

    python scripts/launch.py --dcs 2 --workers-per-dc 1 -- python scripts/sync_overhead.py

For gluon model zoo's ``--model`` (default resnet18_v1), each iteration times
(a) ``trainer.allreduce_grads()``: one ``pushpull`` per parameter, as Trainer.step does, and
(b) one ``pushpull`` of a single fp32 buffer holding the same number of bytes, in place as
the Trainer's are (``--out`` instead writes into a second buffer: the store then writes
through a staging array and MXNet's copy, see docs/kvstore.md),
alternating (a) and (b) so both see the same machine state. Rank 0 prints the medians and
their ratio; the first ``--warmup`` iterations are not counted.
"""
import argparse
import time

import mxnet as mx
import numpy as np
from mxnet import gluon

import netstorm  # noqa: F401  (registers the 'netstorm' kvstore)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="resnet18_v1")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--kvstore", default="netstorm")
    p.add_argument("--out", action="store_true", help="(b) writes a second buffer")
    args = p.parse_args()
    net = gluon.model_zoo.vision.get_model(args.model, pretrained=False)
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 3, 224, 224)))
    kv = mx.kv.create(args.kvstore)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.0}, kvstore=kv,
                            update_on_kvstore=False)
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    for p in params:
        p.grad()[:] = 1.0
    total = sum(int(np.prod(p.shape)) for p in params)
    buffer, out = mx.nd.ones((total,)), mx.nd.zeros((total,))
    kv.init(10 ** 6, buffer)
    trainer._init_kvstore()
    trainer._init_params()
    per_key, one_buffer = [], []
    for it in range(args.warmup + args.iters):
        mx.nd.waitall()
        t0 = time.perf_counter()
        trainer.allreduce_grads()
        mx.nd.waitall()
        t1 = time.perf_counter()
        kv.pushpull(10 ** 6, buffer, out=out if args.out else None)
        mx.nd.waitall()
        t2 = time.perf_counter()
        if it >= args.warmup:
            per_key.append(t1 - t0)
            one_buffer.append(t2 - t1)
        for p in params:             # allreduce wrote sums into the grads: reset them
            p.grad()[:] = 1.0
        buffer[:] = 1.0
    a, b = np.median(per_key), np.median(one_buffer)
    if kv.rank == 0:
        print(f"model={args.model} params={len(params)} bytes={4 * total} "
              f"workers={kv.num_workers} per_key_ms={1000 * a:.1f} one_buffer_ms={1000 * b:.1f} "
              f"ratio={a / b:.3f}{' (b) into a second buffer' if args.out else ''}",
              flush=True)


if __name__ == "__main__":
    main()
