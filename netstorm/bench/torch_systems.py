"""The PyTorch systems of a benchmark (issue 40), on the same emulated WAN, model shapes
and iterations as the others (comm mode; ``netstorm.bench.torch_worker`` runs in every
worker process):

- ``torch-ddp``: PyTorch's DistributedDataParallel over gloo, one process group across
  every DC's workers (rank 0, gloo's store, in the best-connected DC), as a PyTorch user
  would run it across data centers;
- ``torch-ddp-fp16``: the same with DDP's fp16 compression hook;
- ``torch-post-local-sgd``: torch's post-local SGD: gradients all-reduced within each DC,
  the models averaged across every worker each ``PERIOD`` steps in comm mode, each ``--h``
  steps in train mode, as diloco's rounds (compare its mean
  iteration time: the averaging steps are the slow ones);
- ``netstorm-fapt-torch``: netstorm on fapt's trees driven from PyTorch
  (netstorm.torch.DistributedOptimizer), to set beside ``netstorm-fapt`` (from MXNet);
- ``netstorm-diloco-torch`` (train mode): netstorm's diloco from PyTorch
  (netstorm.torch.LocalUpdates), beside ``netstorm-diloco`` and torch's local SGD.

In train mode they train the workload's PyTorch twin (netstorm.bench.torch_training) on the
same data and hyper-parameters. Without PyTorch they are refused (:func:`refused`).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from netstorm.launcher import free_port, run_cluster
from netstorm.launcher.supervisor import Launcher, child_env

__all__ = ["PERIOD", "TORCH_SYNCED", "TORCH_SYSTEMS", "refused", "run_netstorm_torch", "run_torch_ddp",
           "torch_command"]

WORKER = "netstorm.bench.torch_worker"
PERIOD = 4      # torch-post-local-sgd in comm mode: steps per model average (train: --h)


def refused(systems) -> str:
    """Why the PyTorch systems among ``systems`` cannot run here ('' if they can)."""
    mine = [s for s in systems if s in TORCH_SYSTEMS]
    if mine and importlib.util.find_spec("torch") is None:
        return (f"{', '.join(mine)} need PyTorch, not importable here: pip install "
                f"'netstorm[torch]' (a CPU build: docs/torch.md)")
    return ""


def torch_command(ctx, out: Path, backend: str, extra: tuple = ()) -> list:
    """The PyTorch worker's command line for ``backend`` (``ctx.worker_args``: the comm
    mode's model, iterations and straggler)."""
    return [sys.executable, "-P", "-m", WORKER, "--backend", backend, "--out", str(out),
            *ctx.worker_args, *extra]


def _dc_order(ctx) -> list:
    """The DCs, the best-connected first (rank 0 and gloo's store live there)."""
    return [ctx.best_dc] + [dc for dc in ctx.topology.dcs if dc != ctx.best_dc]


def run_torch_ddp(ctx, out: Path, backend: str) -> int:
    """Every DC's workers in one gloo process group (``backend``: ddp, ddp-fp16 or
    post-local-sgd), each in its DC's namespace, ranks in DC order."""
    dcs = _dc_order(ctx)
    per_dc = ctx.workers_per_dc
    groups = ":".join(",".join(str(d * per_dc + i) for i in range(per_dc))
                      for d in range(len(dcs)))
    extra = ("--dc-ranks", groups, "--period", str(ctx.local_steps)) \
        if backend == "post-local-sgd" else ()
    command = torch_command(ctx, out, backend, extra)
    common = {"MASTER_ADDR": ctx.wan.dc_address(dcs[0]), "MASTER_PORT": str(free_port()),
              "WORLD_SIZE": str(len(dcs) * per_dc)}
    launcher = Launcher(ctx.log)
    with launcher:
        for d, dc in enumerate(dcs):
            for i in range(per_dc):
                env = child_env({**common, "RANK": str(d * per_dc + i),
                                 "NETSTORM_BENCH_ADDRESS": ctx.wan.dc_address(dc)})
                launcher.start(f"worker {dc}/{i}", "worker", command, env,
                               ctx.wan.exec_prefix(dc))
        return launcher.wait(len(dcs) * per_dc)


def run_netstorm_torch(ctx, out: Path, policy: str, sync: str = "fsa") -> int:
    """netstorm's cluster as :func:`~netstorm.bench.systems.run_netstorm` runs it (``sync``:
    a setting in ``ctx.sync``), its workers driving it from PyTorch (DistributedOptimizer,
    or LocalUpdates under hfa and diloco)."""
    from .systems import cluster_config     # noqa: PLC0415  (systems lists these rows)
    return run_cluster(cluster_config(ctx, out, policy, sync=sync),
                       torch_command(ctx, out, "netstorm"),
                       wrap_dc=ctx.wan.exec_prefix, out=ctx.log)


TORCH_SYSTEMS = {
    "torch-ddp": lambda ctx, out: run_torch_ddp(ctx, out, "ddp"),
    "torch-ddp-fp16": lambda ctx, out: run_torch_ddp(ctx, out, "ddp-fp16"),
    "torch-post-local-sgd": lambda ctx, out: run_torch_ddp(ctx, out, "post-local-sgd"),
    "netstorm-fapt-torch": lambda ctx, out: run_netstorm_torch(ctx, out, "fapt"),
    "netstorm-diloco-torch": lambda ctx, out: run_netstorm_torch(ctx, out, "fapt", "diloco"),
}
TORCH_SYNCED = {"netstorm-diloco-torch": "diloco"}     # system -> its sync setting (train)
