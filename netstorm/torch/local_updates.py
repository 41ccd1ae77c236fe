"""``LocalUpdates``: the local-update sync modes (``hfa``, ``diloco``) around a PyTorch
model's parameters and the user's inner optimizer (docs/torch.md, docs/sync.md).

The inner optimizer steps on this worker's own parameters; every ``k1``-th step (``hfa``)
or ``h``-th step (``diloco``) each parameter's *delta* since the last synchronization is
pushed as its key's next round, and the synchronized weights that come back (hfa: the last
ones plus the average delta of the DC, or of every worker on a WAN round; diloco: the
servers' outer Nesterov step on the average delta) become both the parameters and the new
base. The same protocol as the MXNet plug-in's :mod:`netstorm.kvstore.local_steps`; the
servers cannot tell the two apart.

The pushes of one synchronization all leave before the first value is awaited (lowest key
first on the WAN). Streaming DiLoCo (``fragments`` > 1 or ``delay`` > 0) is refused with
a clear error (not built here). Per synchronization O(model): one delta, one copy back.
"""
from __future__ import annotations

import numpy as np
import torch

from .arrays import flat_view, numpy_dtype, write_back
from .optimizer import named_parameters_of
from .session import Session, TorchSessionError

__all__ = ["LocalUpdates"]


class LocalUpdates:
    """Wraps ``inner`` (a ``torch.optim.Optimizer`` over the model's parameters): call
    :meth:`step` where the script called ``inner.step()``. At construction every worker's
    parameters become rank 0's (the keys' initial values); blocks while the keys are
    declared. ``zero_grad``, ``state_dict`` and ``param_groups`` are the inner
    optimizer's."""

    def __init__(self, inner: torch.optim.Optimizer, named_parameters=None,
                 session: Session | None = None):
        if session is None:
            raise TorchSessionError("LocalUpdates needs session= (netstorm.torch.init())")
        session.require_mode("LocalUpdates")
        sync = session.sync
        if sync.mode == "diloco" and (sync.fragments != 1 or sync.delay):
            raise TorchSessionError(
                f"LocalUpdates: streaming DiLoCo (fragments={sync.fragments}, "
                f"delay={sync.delay}) is not served by netstorm.torch yet; use fragments = 1 "
                f"and delay = 0 in [sync]")
        self.inner = inner
        self.session = session
        self._client = session.client
        self.every = sync.k1 if sync.mode == "hfa" else sync.h
        self.steps = 0          # inner steps taken
        self.rounds = 0         # synchronizations
        named = named_parameters_of(inner, named_parameters)
        self._params = []       # (key, name, parameter, base: the weights at the last sync)
        for key, (name, param) in zip(session.new_keys(len(named)), named):
            numpy_dtype(param, f"parameter {name!r}")
            view, in_place = flat_view(param, f"parameter {name!r}")
            self._client.init(key, view)            # rank 0's value is the start
            self._client.finish_into(key, self._client.start_pull(key), view)
            with torch.no_grad():
                write_back(param, view, in_place)
            self._params.append((key, name, param, param.detach().clone()))

    @property
    def param_groups(self):
        return self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)

    def step(self) -> bool:
        """One inner step; then, when due, the synchronization. Returns whether this step
        synchronized."""
        self.inner.step()
        self.steps += 1
        if self.steps % self.every:
            return False
        self.synchronize()
        return True

    def synchronize(self) -> None:
        """Push every parameter's delta since the last synchronization as its next round
        and take the synchronized weights (blocks until they came)."""
        self.finish_sync(self.start_sync())

    def start_sync(self) -> list:
        """Push every parameter's delta since the last synchronization as its next round;
        returns the requests for :meth:`finish_sync`. Does not wait."""
        started = []
        with torch.no_grad():
            for key, _, param, base in self._params:
                delta = (param.detach() - base).to("cpu").contiguous().reshape(-1).numpy()
                started.append(self._client.start_push(key, delta, True))
        return started

    def finish_sync(self, started: list) -> None:
        """Wait for the synchronized weights of the pushes ``started``; they become the
        parameters and the base of the next deltas."""
        with torch.no_grad():
            for (key, name, param, base), handle in zip(self._params, started):
                view = np.empty(param.numel(), numpy_dtype(param, f"parameter {name!r}"))
                self._client.finish_into(key, handle, view)
                synced = torch.from_numpy(view).view(param.shape)
                param.copy_(synced)
                base.copy_(synced)
        self.rounds += 1
