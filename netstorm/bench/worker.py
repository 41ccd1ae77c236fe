"""The worker of scripts/bench.py: one per worker process, for every system alike.

    python -m netstorm.bench.worker --kvstore dist_sync|netstorm --model resnet18_v1
                                    --mode comm|train --iters N --out DIR

comm:  every parameter of the model gets a gradient-shaped array of known values
       ((rank + 1) * (iteration % 5 + 1), small integers, so fp32 sums are exact) and is
       synchronized with ``kv.pushpull`` — the call gluon.Trainer makes — once per parameter;
       the iteration ends when every result is written. Every result is checked against the
       exact expected sum.
train: a workload (``--workload``: a model on real data, netstorm.bench.workloads) trained
       with ``Trainer.step`` (netstorm.bench.training): its quality (test accuracy or
       validation loss) against wall time; at the end every rank writes a checksum of its
       weights, which must agree across ranks under the fully synchronous mode.

Writes DIR/rank{R}.json with per-iteration seconds (the first is warm-up) and the checks.
"""
import argparse
import json
import os
import time

import mxnet as mx
from mxnet import gluon

from netstorm.bench import training
from netstorm.bench.workloads import WORKLOADS, resolve

__all__ = ["build", "comm", "main", "parse_args"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kvstore", required=True)
    p.add_argument("--model", default="resnet18_v1")
    p.add_argument("--mode", choices=["comm", "train"], default="comm")
    p.add_argument("--iters", type=int, default=5, help="measured iterations (+1 warm-up)")
    p.add_argument("--out", required=True)
    p.add_argument("--straggler-host", default=None,
                   help="workers on this address (their DC's) compute --straggler-s longer")
    p.add_argument("--straggler-s", type=float, default=0.0)
    t = p.add_argument_group("train mode (None: the workload's default)")
    t.add_argument("--workload", default="mlp-digits", choices=list(WORKLOADS))
    t.add_argument("--data", default=None,
                   help="digits workloads: 'digits' or a directory of IDX files; lm: "
                        "'python-docs' or a directory of HTML files")
    t.add_argument("--hidden", type=int, default=None,
                   help="mlp: hidden width; cnn: dense width; lm: model width")
    t.add_argument("--layers", type=int, default=2, help="lm: transformer blocks")
    t.add_argument("--heads", type=int, default=4, help="lm: attention heads")
    t.add_argument("--seq-len", type=int, default=32, help="lm: tokens per sample")
    t.add_argument("--vocab", type=int, default=8192, help="lm: vocabulary size")
    t.add_argument("--eval-tokens", type=int, default=4096,
                   help="lm: validation tokens per evaluation")
    t.add_argument("--batch-size", type=int, default=None, help="per worker")
    t.add_argument("--lr", type=float, default=None)
    t.add_argument("--wd", type=float, default=0.0)
    t.add_argument("--momentum", type=float, default=0.9, help="sgd and dcasgd")
    t.add_argument("--optimizer", default=None, choices=list(training.OPTIMIZERS),
                   help="dcasgd: MXNet's delay-compensated SGD (netstorm-mixed)")
    t.add_argument("--seed", type=int, default=42)
    t.add_argument("--eval-every", type=int, default=None)
    t.add_argument("--compression", type=json.loads, default=None,
                   help="MXNet compression_params as JSON, given to gluon.Trainer")
    t.add_argument("--step-lines", action="store_true",
                   help="bench --chaos: rank 0 prints 'step N t=UNIX' as each step ends")
    t.add_argument("--checkpoint-every", type=int, default=0,
                   help="bench --chaos: rank 0 writes the cluster's [recovery] checkpoint "
                        "every N steps (0: never)")
    args = p.parse_args(argv)
    if args.mode == "train":
        resolve(args)
    return args


def build(model: str):
    net = gluon.model_zoo.vision.get_model(model, pretrained=False, classes=1000)
    net.initialize(mx.init.Xavier(magnitude=2), force_reinit=True)
    size = 299 if model.startswith("inception") else 224
    net(mx.nd.zeros((1, 3, size, size)))       # resolve deferred shapes, as for real images
    return net


def comm(kv, net, iters, extra_s=0.0):
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    shapes = [p.shape for p in params]
    for i, shape in enumerate(shapes):
        kv.init(i, mx.nd.zeros(shape))
    grads = [mx.nd.zeros(s) for s in shapes]
    outs = [mx.nd.zeros(s) for s in shapes]
    n = kv.num_workers
    times, starts, correct = [], [], True
    for it in range(iters + 1):
        factor = it % 5 + 1
        for g in grads:
            g[:] = (kv.rank + 1) * factor
        mx.nd.waitall()
        start = time.perf_counter()
        starts.append(time.monotonic())
        if extra_s:
            time.sleep(extra_s)              # a straggler: slower compute before the push
        for i in range(len(shapes)):
            kv.pushpull(i, grads[i], out=outs[i], priority=-i)
        mx.nd.waitall()
        times.append(time.perf_counter() - start)
        want = n * (n + 1) / 2 * factor
        correct &= all(bool((o.asnumpy() == want).all()) for o in outs)
        log(kv, it, iters, times[-1])
    return times, {"exact_sums": correct, "iter_start_monotonic": starts}


def log(kv, it, iters, seconds):
    if kv.rank == 0:
        tag = "warm-up" if it == 0 else f"{it}/{iters}"
        print(f"iter {tag} {seconds:.3f}s", flush=True)


def main():
    args = parse_args()
    if args.kvstore == "netstorm":
        import netstorm.kvstore  # noqa: F401,PLC0415  (registers 'netstorm' with MXNet)
    kv = mx.kv.create(args.kvstore)
    # the host this worker runs in: netstorm's launcher and ps-lite's each say it
    here = os.environ.get("NETSTORM_HOST") or os.environ.get("DMLC_NODE_HOST")
    args.extra_s = args.straggler_s if args.straggler_host and here == args.straggler_host \
        else 0.0
    if args.extra_s:
        print(f"rank {kv.rank}: straggler, {args.extra_s:g} s of extra compute per iteration",
              flush=True)
    if args.mode == "comm":
        net = build(args.model)
        nbytes = training.gradient_bytes(net)
        times, checks = comm(kv, net, args.iters, args.extra_s)
    else:
        times, checks = training.train(kv, args)
        nbytes = checks.pop("model_bytes")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"rank{kv.rank}.json"), "w") as f:
        json.dump({"rank": kv.rank, "num_workers": kv.num_workers, "iter_s": times,
                   "model_bytes": nbytes, **checks}, f)
    if getattr(kv, "sync_mode", "fsa") != "esync":  # esync: workers end at different rounds
        (kv.barrier if hasattr(kv, "barrier") else kv._barrier)()
    print(f"rank {kv.rank} done", flush=True)


if __name__ == "__main__":
    main()
