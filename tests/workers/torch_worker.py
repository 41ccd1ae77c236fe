"""Worker script for tests/cluster/test_torch.py: the same small model, data and optimizer
trained either through netstorm.torch (under the launcher) or through PyTorch's
DistributedDataParallel over gloo (``--ddp``, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set
by the test); saves its final weights as OUT/rankR.pt.

    torch_worker.py OUT [--ddp] [--steps S]

Each rank starts from its own random weights and an optimizer with its own learning rate;
netstorm's broadcasts (DDP's constructor, for the weights) make them rank 0's. Under
sync mode hfa / diloco the script uses LocalUpdates instead of DistributedOptimizer.
"""
import argparse
import os

import torch

BATCH, FEATURES, CLASSES, LR = 8, 12, 5, 0.1


def build(rank):
    torch.manual_seed(rank)         # every rank its own: the broadcast must fix it
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, CLASSES))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(BATCH, FEATURES, generator=g), torch.randint(0, CLASSES, (BATCH,),
                                                                    generator=g)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    if args.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(build(rank))
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
        step_of = opt.step
    else:
        import sys
        import netstorm.torch as nst
        session = nst.init()
        assert "mxnet" not in sys.modules, "netstorm.torch imported mxnet"
        rank = int(os.environ["RANK"])
        assert rank == session.rank and os.environ["WORLD_SIZE"] == str(session.size)
        model = build(rank)
        nst.broadcast_parameters(model.state_dict(), session)
        inner = torch.optim.SGD(model.parameters(), lr=LR * (rank + 1), momentum=0.9)
        nst.broadcast_optimizer_state(inner, session)
        assert inner.param_groups[0]["lr"] == LR, inner.param_groups[0]["lr"]
        if session.sync.mode == "fsa":
            opt = nst.DistributedOptimizer(inner, model.named_parameters(), session=session)
        else:
            opt = nst.LocalUpdates(inner, model.named_parameters(), session=session)
        step_of = opt.step
    for step in range(args.steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        step_of()
    module = model.module if args.ddp else model
    torch.save(module.state_dict(), os.path.join(args.out, f"rank{rank}.pt"))
    print(f"rank {rank} done", flush=True)
    if args.ddp:    # gloo's threads end before the interpreter does: without it a rank whose
        dist.barrier()      # peers already left may abort at exit ("terminate called
        dist.destroy_process_group()    # without an active exception", seen under load)
    else:
        session.close()


if __name__ == "__main__":
    main()
