"""Train a small CNN with PyTorch on netstorm (the task of examples/train_gluon.py).

Distributed run (the launcher starts one copy of this script per worker and sets up the
netstorm environment for each; netstorm.torch.init() then sets RANK, WORLD_SIZE,
LOCAL_RANK for the script):

    netstorm-launch --dcs 2 --workers-per-dc 2 -- python examples/train_torch.py
    netstorm-launch --dcs 2 --sync hfa:k1=4,k2=2 -- python examples/train_torch.py

Single process, no distribution (no launcher):

    python examples/train_torch.py

Data is scikit-learn's bundled 8x8 digits set (no download needed); --data-dir DIR reads
MNIST IDX files from DIR instead. Each worker trains on the shard r, r+N, r+2N, ... and
runs the same number of batches per epoch. Under sync mode fsa the gradients are averaged
over the workers (netstorm.torch.DistributedOptimizer); under hfa or diloco each worker
steps locally and the models are averaged (netstorm.torch.LocalUpdates). The learning
rate is scaled by the number of workers, so that the updates are those of the MXNet
example, whose kvstore sums the workers' gradients.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

try:
    from netstorm.datasets import DatasetError, load_digits_data, load_mnist_idx, shard
except ImportError as exc:
    sys.exit("error: cannot import netstorm (%s).\nInstall it (pip install -e '.[torch]' in "
             "its repository)." % exc)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="per-worker batch size")
    p.add_argument("--lr", type=float, default=0.02,
                   help="SGD lr per worker (scaled by the number of workers)")
    p.add_argument("--data-dir", default=None, help="directory with MNIST IDX files")
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args(argv)


def build_net(side):
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(64 * (side // 2) ** 2, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    for module in net:
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):     # as gluon's Xavier
            torch.nn.init.xavier_uniform_(module.weight)
            torch.nn.init.zeros_(module.bias)
    return net


def evaluate(net, x, y, batch_size=500):
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            out = net(torch.from_numpy(x[i:i + batch_size]))
            correct += int((out.argmax(dim=1).numpy() == y[i:i + batch_size]).sum())
    return correct / float(len(x))


def main(argv=None):
    args = parse_args(argv)
    session = None
    if "NETSTORM_SCHEDULER" in os.environ:      # started by netstorm-launch
        import netstorm.torch as nst
        session = nst.init()
    rank = session.rank if session else 0
    num_workers = session.size if session else 1

    if session is not None:
        torch.set_num_threads(1)    # several workers share this host's cores
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    try:
        if args.data_dir:
            x_tr, y_tr, x_te, y_te = load_mnist_idx(args.data_dir)
        else:
            x_tr, y_tr, x_te, y_te = load_digits_data(args.seed)
    except DatasetError as exc:
        print("error: cannot load the data: %s" % exc, file=sys.stderr, flush=True)
        return 2
    x_sh, y_sh, n_batches = shard(x_tr, y_tr, rank, num_workers, args.batch_size)
    if n_batches == 0:
        print("error: shard too small for batch size %d" % args.batch_size,
              file=sys.stderr, flush=True)
        return 2

    net = build_net(x_tr.shape[-1])
    inner = torch.optim.SGD(net.parameters(), lr=args.lr * num_workers, momentum=0.9)
    opt = inner
    if session is not None:
        nst.broadcast_parameters(net.state_dict(), session)
        if session.sync.mode == "fsa":
            opt = nst.DistributedOptimizer(inner, net.named_parameters(), session=session)
        else:
            opt = nst.LocalUpdates(inner, net.named_parameters(), session=session)
    loss_fn = torch.nn.CrossEntropyLoss()
    shuffle_rng = np.random.RandomState(args.seed + 1000 * rank)
    if rank == 0:
        print("netstorm.torch workers=%d sync=%s train=%d shard=%d test=%d batches/epoch=%d"
              % (num_workers, session.sync.mode if session else "none", len(x_tr), len(x_sh),
                 len(x_te), n_batches), flush=True)

    t_start, iter_times, test_acc = time.time(), [], 0.0
    for epoch in range(1, args.epochs + 1):
        t_epoch, epoch_iters = time.time(), []
        loss_sum, correct, seen = 0.0, 0, 0
        order = shuffle_rng.permutation(len(x_sh))
        net.train()
        for b in range(n_batches):
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            data = torch.from_numpy(x_sh[idx])
            label = torch.from_numpy(y_sh[idx]).long()
            t0 = time.time()
            opt.zero_grad()
            out = net(data)
            loss = loss_fn(out, label)
            loss.backward()
            opt.step()
            epoch_iters.append((time.time() - t0) * 1000.0)
            loss_sum += float(loss) * len(idx)
            correct += int((out.argmax(dim=1).numpy() == y_sh[idx]).sum())
            seen += len(idx)
        iter_times.extend(epoch_iters)
        net.eval()
        test_acc = evaluate(net, x_te, y_te)
        if rank == 0:
            print("epoch %d/%d loss=%.4f train_acc=%.4f test_acc=%.4f iter_ms=%.1f time=%.1fs"
                  % (epoch, args.epochs, loss_sum / max(seen, 1), correct / max(seen, 1.0),
                     test_acc, np.mean(epoch_iters or [0.0]), time.time() - t_epoch),
                  flush=True)

    print("summary rank=%d workers=%d epochs=%d accuracy=%.4f mean_iter_ms=%.2f total_s=%.1f"
          % (rank, num_workers, args.epochs, test_acc, np.mean(iter_times or [0.0]),
             time.time() - t_start), flush=True)
    if session is not None:
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
