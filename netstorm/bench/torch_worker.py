"""The PyTorch worker of scripts/bench.py: one per worker process, for every PyTorch system
alike (netstorm/bench/torch_systems.py).

    python -m netstorm.bench.torch_worker --backend netstorm|ddp|ddp-fp16|post-local-sgd
        --model resnet18_v1 --mode comm|train --iters N --out DIR [--dc-ranks 0,1:2,3]

train: the workload's PyTorch twin trained as netstorm.bench.worker trains it with MXNet
(netstorm.bench.torch_training), the same result file.

comm: every parameter of the model's PyTorch twin (netstorm.bench.torch_models) gets the gradient
``(rank + 1) * (iteration % 5 + 1) * N`` from a backward pass over ``sum(p * c)`` (so the
synchronization is driven by autograd's hooks, as in training): DDP's averaging and
netstorm.torch's both give the exact sum of ``(rank + 1) * factor`` (small integers, exact in
fp32 and fp16). The iteration lasts from the backward pass to the synchronized gradients
(and the optimizer's step, learning rate 0). Every result is checked (the DC's average,
for post-local SGD's local steps).

- ``netstorm``: netstorm.torch's DistributedOptimizer, or LocalUpdates under the cluster's
  hfa or diloco (started by the launcher);
- ``ddp``: DistributedDataParallel over gloo, one process group across every DC's workers;
- ``ddp-fp16``: the same with DDP's fp16 compression hook;
- ``post-local-sgd``: torch's post-local SGD: gradients all-reduced within the DC
  (``post_localSGD_hook``, a subgroup per DC from ``--dc-ranks``) and the models averaged
  across every worker each ``--period`` steps (``PostLocalSGDOptimizer``) and once after the
  last step (train mode: every rank ends with the same weights).

DDP's ranks come from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and, for gloo's own
address, NETSTORM_BENCH_ADDRESS (every namespace shares the host name gloo would resolve).
Writes DIR/rank{R}.json as netstorm.bench.worker does.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import time

import numpy as np
import torch

from netstorm.bench.torch_models import build
from netstorm.bench.torch_training import inner_optimizer, prepare, train
from netstorm.bench.workloads import WORKLOADS, resolve

__all__ = ["expected", "main", "parse_args"]

BACKENDS = ("netstorm", "ddp", "ddp-fp16", "post-local-sgd")
TIMEOUT = datetime.timedelta(seconds=600)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", required=True, choices=BACKENDS)
    p.add_argument("--model", default="resnet18_v1")
    p.add_argument("--mode", choices=["comm", "train"], default="comm")
    p.add_argument("--iters", type=int, default=5, help="measured iterations (+1 warm-up)")
    p.add_argument("--out", required=True)
    p.add_argument("--period", type=int, default=4, help="post-local-sgd: steps per average")
    p.add_argument("--dc-ranks", default="", help="post-local-sgd: each DC's ranks, "
                                                  "'0,1:2,3'")
    p.add_argument("--straggler-host", default=None)
    p.add_argument("--straggler-s", type=float, default=0.0)
    t = p.add_argument_group("train mode: netstorm.bench.worker's flags, resolved by the bench")
    t.add_argument("--workload", default="mlp-digits", choices=list(WORKLOADS))
    t.add_argument("--data", default=None)
    t.add_argument("--hidden", type=int, default=None)
    t.add_argument("--layers", type=int, default=2)
    t.add_argument("--heads", type=int, default=4)
    t.add_argument("--seq-len", type=int, default=32)
    t.add_argument("--vocab", type=int, default=8192)
    t.add_argument("--eval-tokens", type=int, default=4096)
    t.add_argument("--batch-size", type=int, default=None)
    t.add_argument("--lr", type=float, default=None)
    t.add_argument("--wd", type=float, default=0.0)
    t.add_argument("--momentum", type=float, default=0.9)
    t.add_argument("--optimizer", default=None, choices=["sgd", "adam"])
    t.add_argument("--seed", type=int, default=42)
    t.add_argument("--eval-every", type=int, default=None)
    args = p.parse_args(argv)
    if args.mode == "train":
        resolve(args)
    return args


class _Summed(torch.nn.Module):
    """The model's parameters and a forward pass whose gradient is ``c`` everywhere."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, c):
        return sum((p * c).sum() for p in self.model.parameters())


def expected(rank: int, size: int, factor: int, dc_ranks=None) -> float:
    """The synchronized gradient of every element: the sum of every worker's
    ``(rank + 1) * factor`` (their gradients carry a factor ``size`` that averaging
    removes), or for a DC-local all-reduce (``dc_ranks``: this DC's) its average."""
    if dc_ranks is None:
        return size * (size + 1) / 2 * factor
    return float(np.mean([(r + 1) * factor * size for r in dc_ranks]))


def _gloo_at(address: str) -> None:
    """Make the gloo process groups bind to ``address``: gloo resolves the host name, which
    every network namespace of the emulated WAN shares (a bench-only shim)."""
    import torch.distributed.distributed_c10d as c10d
    gloo = c10d.ProcessGroupGloo

    class GlooAt(gloo):
        def __init__(self, store, rank, size, timeout=TIMEOUT):
            options = gloo._Options()
            options._devices = [gloo.create_device(hostname=address)]
            options._timeout = timeout
            super().__init__(store, rank, size, options)
    c10d.ProcessGroupGloo = GlooAt


def _ddp_group(args) -> tuple:
    """Join DDP's process group: (rank, size)."""
    import torch.distributed as dist
    if os.environ.get("NETSTORM_BENCH_ADDRESS"):
        _gloo_at(os.environ["NETSTORM_BENCH_ADDRESS"])
    dist.init_process_group("gloo", timeout=TIMEOUT)
    return dist.get_rank(), dist.get_world_size()


def _ddp(args, module, inner, rank: int) -> tuple:
    """(module wrapped in DDP, its optimizer, this DC's ranks or None, what runs after the
    last step or None): post-local SGD ends with one average of every worker's model."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    ddp = torch.nn.parallel.DistributedDataParallel(module)
    if args.backend == "ddp-fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    if args.backend != "post-local-sgd":
        return ddp, inner, None, None
    from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
        PostLocalSGDState, post_localSGD_hook)
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
    from torch.distributed.algorithms.model_averaging.utils import average_parameters
    from torch.distributed.optim import PostLocalSGDOptimizer
    groups = [[int(r) for r in part.split(",")] for part in args.dc_ranks.split(":")]
    subgroup, _ = dist.new_subgroups_by_enumeration(groups, timeout=TIMEOUT)
    ddp.register_comm_hook(PostLocalSGDState(None, subgroup, start_localSGD_iter=1),
                           post_localSGD_hook)
    opt = PostLocalSGDOptimizer(inner, PeriodicModelAverager(args.period, warmup_steps=1))
    return ddp, opt, next(g for g in groups if rank in g), \
        lambda: average_parameters(module.parameters(), dist.group.WORLD)


def comm(forward, opt, params, args, rank: int, size: int, dc_ranks) -> tuple:
    """Comm mode's iterations (see the module doc): (seconds each, checks)."""
    times, starts, correct = [], [], True
    for it in range(args.iters + 1):
        factor = it % 5 + 1
        c = torch.tensor(float((rank + 1) * factor * size))
        opt.zero_grad()
        start = time.perf_counter()
        starts.append(time.monotonic())
        if args.extra_s:
            time.sleep(args.extra_s)
        forward(c).backward()
        opt.step()
        times.append(time.perf_counter() - start)
        want = expected(rank, size, factor, dc_ranks if it >= 1 else None)
        correct &= all(bool(torch.allclose(p.grad, torch.full_like(p.grad, want), rtol=1e-6,
                                           atol=0)) for p in params)
        if rank == 0:
            print(f"iter {'warm-up' if it == 0 else f'{it}/{args.iters}'} {times[-1]:.3f}s",
                  flush=True)
    return times, {"exact_sums": correct, "iter_start_monotonic": starts,
                   "model_bytes": sum(p.numel() * p.element_size() for p in params)}


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)        # several workers share this host's cores
    session = None
    if args.backend == "netstorm":
        import netstorm.torch as nst
        session = nst.init()
        rank, size = session.rank, session.size
    else:
        rank, size = _ddp_group(args)
    here = os.environ.get("NETSTORM_HOST") or os.environ.get("NETSTORM_BENCH_ADDRESS")
    args.extra_s = args.straggler_s if args.straggler_host and here == args.straggler_host \
        else 0.0
    task = prepare(args, rank, size) if args.mode == "train" else None
    if task is None:
        torch.manual_seed(0)
        module = _Summed(build(args.model))
        inner = torch.optim.SGD(module.parameters(), lr=0.0)
    else:
        module = task.net
        inner = inner_optimizer(args, module.parameters(), size)
    finish, dc_ranks = None, None
    if session is not None:
        forward = module
        wrap = nst.DistributedOptimizer if session.sync.mode == "fsa" else nst.LocalUpdates
        opt = wrap(inner, module.named_parameters(), session=session)
    else:
        forward, opt, dc_ranks, finish = _ddp(args, module, inner, rank)
    if task is None:
        times, checks = comm(forward, opt, list(module.parameters()), args, rank, size,
                             dc_ranks)
    else:
        times, checks = train(task, forward, opt, args, rank, finish)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "num_workers": size, "iter_s": times, **checks}, f)
    if session is not None:
        session.client.barrier()
        session.close()
    else:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
