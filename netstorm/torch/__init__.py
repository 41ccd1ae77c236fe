"""``netstorm.torch``: PyTorch on netstorm's engine, thin as Horovod's PyTorch module is over
Horovod's core (docs/torch.md).

The same worker client the MXNet plug-in (``netstorm.kvstore``) drives carries PyTorch's
tensors as numpy arrays: every cluster setting (trees, awareness, compression, sync mode,
recovery, security) works unchanged. Nothing here imports MXNet::

    import netstorm.torch as nst

    session = nst.init()                    # joins the cluster; sets RANK, WORLD_SIZE, ...
    nst.broadcast_parameters(model.state_dict(), session)
    opt = nst.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   model.named_parameters(), session)
    ...                                     # loss.backward(); opt.step() as usual
    session.close()

- :func:`init` / :class:`Session` (:mod:`.session`): joining, ranks, the keys' ids;
- :class:`DistributedOptimizer` (:mod:`.optimizer`), sync mode ``fsa``: each gradient is
  summed over every worker as soon as backward() produced it, ``step()`` waits for the sums
  and runs the wrapped optimizer on their average;
- :class:`LocalUpdates` (:mod:`.local_updates`), sync modes ``hfa`` and ``diloco``: the
  user's inner optimizer steps locally, the model deltas are averaged (hfa) or fed to the
  servers' outer optimizer (diloco) every ``k1`` / ``h`` steps;
- :func:`broadcast_parameters`, :func:`broadcast_optimizer_state` (:mod:`.broadcast`):
  rank 0's values everywhere.
"""
from __future__ import annotations

from .broadcast import broadcast_optimizer_state, broadcast_parameters
from .local_updates import LocalUpdates
from .optimizer import DistributedOptimizer
from .session import Session, TorchSessionError, init

__all__ = ["DistributedOptimizer", "LocalUpdates", "Session", "TorchSessionError",
           "broadcast_optimizer_state", "broadcast_parameters", "init"]
