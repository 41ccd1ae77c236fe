"""Worker script: mx.mod.Module with kvstore='netstorm' (str keys, server-side optimizer).

    module_worker.py OUT_DIR [--steps S]

Saves its final arg params as OUT_DIR/rank{R}.npz; the test replays every rank's batch as one
global batch in a single process (what dist_sync's rescale by num_workers is equivalent to).
"""
import argparse
import os

import mxnet as mx
import numpy as np

import netstorm

BATCH, FEATURES, CLASSES = 6, 10, 4


def symbol():
    data = mx.sym.Variable("data")
    fc1 = mx.sym.FullyConnected(data, num_hidden=8, name="fc1")
    act = mx.sym.Activation(fc1, act_type="tanh", name="act1")
    fc2 = mx.sym.FullyConnected(act, num_hidden=CLASSES, name="fc2")
    return mx.sym.SoftmaxOutput(fc2, name="softmax")


def initial_params():
    rng = np.random.RandomState(3)
    shapes = {"fc1_weight": (8, FEATURES), "fc1_bias": (8,), "fc2_weight": (CLASSES, 8),
              "fc2_bias": (CLASSES,)}
    return {k: mx.nd.array(rng.uniform(-0.5, 0.5, s)) for k, s in shapes.items()}


def batches(rank, step):
    rng = np.random.RandomState(500 * step + rank)
    return rng.randn(BATCH, FEATURES).astype("float32"), rng.randint(0, CLASSES, BATCH)


OPTIMIZER = ("sgd", (("learning_rate", 0.2), ("momentum", 0.5), ("wd", 0.01)))


def make_module(batch, kvstore_name):
    mod = mx.mod.Module(symbol(), data_names=["data"], label_names=["softmax_label"])
    mod.bind(data_shapes=[("data", (batch, FEATURES))],
             label_shapes=[("softmax_label", (batch,))])
    mod.init_params(arg_params=initial_params(), aux_params={})
    mod.init_optimizer(kvstore=kvstore_name, optimizer=OPTIMIZER[0],
                       optimizer_params=OPTIMIZER[1])
    return mod


def step(mod, x, y):
    mod.forward_backward(mx.io.DataBatch([mx.nd.array(x)], [mx.nd.array(y)]))
    mod.update()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    mod = make_module(BATCH, "netstorm")
    kv = mod._kvstore
    assert isinstance(kv, netstorm.NetStorm) and mod._update_on_kvstore
    for s in range(args.steps):
        step(mod, *batches(kv.rank, s))
    args_, _ = mod.get_params()
    np.savez(os.path.join(args.out, f"rank{kv.rank}.npz"),
             **{k: v.asnumpy() for k, v in args_.items()})
    print(f"rank {kv.rank} done", flush=True)


if __name__ == "__main__":
    main()
