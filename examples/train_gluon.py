"""Train a small CNN with gluon.Trainer on top of an MXNet kvstore.

Distributed run (the launcher starts one copy of this script per worker and
sets up the netstorm environment for each):

    python scripts/launch.py --dcs 2 --workers-per-dc 2 -- python examples/train_gluon.py

Single process, no distribution:

    python examples/train_gluon.py --kvstore local

Data is scikit-learn's bundled 8x8 digits set (no download needed). Pass
--data-dir DIR to use MNIST IDX files from DIR instead (train-images-idx3-ubyte,
train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each
optionally .gz). Nothing is ever downloaded.

Each worker trains on the shard r, r+N, r+2N, ... of the training set, runs
the same number of batches per epoch as every other worker and calls
trainer.step(batch_size) with its own batch size, so with a dist_sync-style
kvstore the gradients of all workers are summed.
"""
import argparse
import sys
import time

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

try:    # the data helpers; importing netstorm also registers the 'netstorm' kvstore type
    from netstorm.datasets import DatasetError, load_digits_data, load_mnist_idx, shard
except ImportError as exc:
    sys.exit("error: cannot import netstorm (%s).\nInstall it (pip install -e . in its "
             "repository, or bash scripts/demo.sh)." % exc)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kvstore", default="netstorm",
                   help="kvstore type: netstorm (default), local, dist_sync, ...")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="per-worker batch size")
    p.add_argument("--lr", type=float, default=0.02,
                   help="SGD lr; gradients are summed over workers, so keep it small")
    p.add_argument("--data-dir", default=None, help="directory with MNIST IDX files")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--update-on-kvstore", choices=["auto", "true", "false"], default="auto")
    p.add_argument("--checkpoint", default=None,
                   help="netstorm: rank 0 writes the servers' model and optimizer states "
                        "here every --checkpoint-every steps (resume: launch.py --resume)")
    p.add_argument("--checkpoint-every", type=int, default=50)
    return p.parse_args(argv)


def build_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(32, 3, padding=1, activation="relu"),
            gluon.nn.Conv2D(64, 3, padding=1, activation="relu"),
            gluon.nn.MaxPool2D(2),
            gluon.nn.Flatten(),
            gluon.nn.Dense(128, activation="relu"),
            gluon.nn.Dense(10))
    return net


def evaluate(net, x, y, batch_size=500):
    correct = 0
    for i in range(0, len(x), batch_size):
        out = net(mx.nd.array(x[i:i + batch_size]))
        correct += int((out.argmax(axis=1).asnumpy() == y[i:i + batch_size]).sum())
    return correct / float(len(x))


def main(argv=None):
    args = parse_args(argv)
    name = None if args.kvstore.lower() == "none" else args.kvstore
    if name in (None, "local"):
        kv, rank, num_workers = name, 0, 1
    else:
        kv = mx.kv.create(name)
        rank, num_workers = kv.rank, kv.num_workers

    mx.random.seed(args.seed)
    np.random.seed(args.seed)
    if args.data_dir:
        try:
            x_tr, y_tr, x_te, y_te = load_mnist_idx(args.data_dir)
        except DatasetError as exc:
            print("error: cannot load MNIST from %s: %s" % (args.data_dir, exc),
                  file=sys.stderr, flush=True)
            sys.exit(2)
    else:
        x_tr, y_tr, x_te, y_te = load_digits_data(args.seed)
    x_sh, y_sh, n_batches = shard(x_tr, y_tr, rank, num_workers, args.batch_size)
    if n_batches == 0:
        print("error: shard too small for batch size %d" % args.batch_size,
              file=sys.stderr, flush=True)
        sys.exit(2)

    net = build_net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    update_on_kv = {"auto": None, "true": True, "false": False}[args.update_on_kvstore]
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": args.lr, "momentum": 0.9},
                            kvstore=kv, update_on_kvstore=update_on_kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    shuffle_rng = np.random.RandomState(args.seed + 1000 * rank)
    progress_every = 100 if n_batches >= 200 else 0
    if rank == 0:
        print("kvstore=%s workers=%d train=%d shard=%d test=%d batches/epoch=%d"
              % (args.kvstore, num_workers, len(x_tr), len(x_sh), len(x_te), n_batches),
              flush=True)

    # a worker restarted into its rank (launch.py --worker-restarts) goes on where its lost
    # process stopped: the cluster's current weights first, then skip the steps it had done
    # (under diloco / hfa: up to its rank's last synchronization, x h / k1 steps per round)
    skip = getattr(kv, "resumed_step", getattr(kv, "resumed_round", 0))
    if skip:    # pull the weights now: MXNet 1.9.1's Trainer would at its first step only,
        net(mx.nd.array(x_sh[:1]))  # after the gradient (on the local weights); first the
        trainer._optimizer.rescale_grad = 1.0 / args.batch_size     # shapes and the scale
        trainer._init_kvstore()     # step() would set, then the store and the weights
        trainer._init_params()
        print("rank %d resumes after step %d" % (rank, skip), flush=True)
    t_start, iter_times, test_acc, step = time.time(), [], 0.0, 0
    for epoch in range(1, args.epochs + 1):
        t_epoch, epoch_iters = time.time(), []
        loss_sum, correct, seen = 0.0, 0, 0
        order = shuffle_rng.permutation(len(x_sh))
        for b in range(n_batches):
            step += 1
            if step <= skip:
                continue
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            data, label = mx.nd.array(x_sh[idx]), mx.nd.array(y_sh[idx])
            t0 = time.time()
            with autograd.record():
                out = net(data)
                loss = loss_fn(out, label)
            loss.backward()
            trainer.step(args.batch_size)
            loss_sum += float(loss.sum().asscalar())  # also waits for the step
            if args.checkpoint and rank == 0 and step % args.checkpoint_every == 0:
                kv.save_checkpoint(args.checkpoint)   # between two steps, training goes on
            epoch_iters.append((time.time() - t0) * 1000.0)
            correct += int((out.argmax(axis=1).asnumpy() == y_sh[idx]).sum())
            seen += len(idx)
            if rank == 0 and progress_every and (b + 1) % progress_every == 0:
                print("  batch %d/%d loss=%.4f" % (b + 1, n_batches, loss_sum / seen), flush=True)
        iter_times.extend(epoch_iters)
        test_acc = evaluate(net, x_te, y_te)
        if rank == 0:
            print("epoch %d/%d loss=%.4f train_acc=%.4f test_acc=%.4f iter_ms=%.1f time=%.1fs"
                  % (epoch, args.epochs, loss_sum / max(seen, 1), correct / max(seen, 1.0),
                     test_acc, np.mean(epoch_iters or [0.0]), time.time() - t_epoch),
                  flush=True)

    print("summary rank=%d workers=%d epochs=%d accuracy=%.4f mean_iter_ms=%.2f total_s=%.1f"
          % (rank, num_workers, args.epochs, test_acc, np.mean(iter_times or [0.0]),
             time.time() - t_start), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
