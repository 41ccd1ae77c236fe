"""``DistributedOptimizer``: data-parallel training of a PyTorch model through netstorm,
sync mode ``fsa`` (docs/torch.md).

As Horovod's: the wrapped optimizer keeps its object, state and class (its class becomes a
subclass of its own that adds the synchronization, so learning-rate schedulers and
``isinstance`` see the optimizer they were given). Each parameter is one key. During
``backward()`` a post-accumulate-grad hook pushes a parameter's gradient the moment it is
complete (asynchronously: the worker client's I/O thread sends it while backward goes on);
the DC server sums its workers' pushes, the DCs sum theirs along the WAN trees, and the sum
comes back as the key's value (no optimizer runs on the servers). ``step()`` waits for
every sum, divides by the number of workers (``average``) and runs the wrapped optimizer.

Priority: keys are numbered in the order of ``named_parameters`` (a model's forward order),
and the WAN sends the chunks of one round lowest key first, so the first layers' sums,
which the next forward pass needs first, overtake the later ones.

A parameter whose gradient backward did not produce (unused in this pass) is pushed as
zeros at ``step()``, so every worker pushes every key once per step. Costs: a push is one
flat view of the gradient (no copy for a contiguous CPU tensor); ``step()`` one copy of
each sum into the gradient, O(model).
"""
from __future__ import annotations

import numpy as np
import torch

from .arrays import flat_view, numpy_dtype, write_back
from .session import Session, TorchSessionError

__all__ = ["DistributedOptimizer", "named_parameters_of"]


def named_parameters_of(optimizer: torch.optim.Optimizer, named_parameters) -> list:
    """``[(name, parameter)]`` of every parameter ``optimizer`` steps, in the order of
    ``named_parameters`` (default: the optimizer's own order, named ``param.I``), with
    :class:`TorchSessionError` naming a parameter given twice or one missing."""
    stepped = [p for group in optimizer.param_groups for p in group["params"]]
    if named_parameters is None:
        return [(f"param.{i}", p) for i, p in enumerate(stepped)]
    named = list(named_parameters)
    if any(not (isinstance(item, tuple) and len(item) == 2) for item in named):
        raise TorchSessionError("named_parameters must be (name, parameter) pairs, as "
                                "model.named_parameters() gives")
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise TorchSessionError(f"named_parameters names a parameter twice: "
                                f"{sorted({n for n in names if names.count(n) > 1})}")
    known = {id(p) for _, p in named}
    missing = [i for i, p in enumerate(stepped) if id(p) not in known]
    if missing:
        raise TorchSessionError(f"the optimizer steps {len(missing)} parameter(s) not in "
                                f"named_parameters (its parameters {missing[:5]}...)")
    wanted = {id(p) for p in stepped}
    return [(n, p) for n, p in named if id(p) in wanted]


class _Key:
    """One parameter's key and its round in flight."""

    __slots__ = ("key", "name", "param", "passes", "handle", "array", "in_place")

    def __init__(self, key: int, name: str, param):
        self.key, self.name, self.param = key, name, param
        self.passes = 0         # backward passes accumulated since the last step
        self.handle = None      # the push's request, until its sum is taken
        self.array = self.in_place = None


class _Synchronized:
    """What :func:`DistributedOptimizer` adds to the wrapped optimizer's class."""

    def _netstorm_start(self, session: Session, named, average: bool, passes: int) -> None:
        self._ns_client = session.client
        self._ns_size = session.size
        self._ns_average = average
        self._ns_passes = passes
        self._ns_synced = False
        self._ns_keys = [_Key(k, n, p) for k, (n, p) in zip(session.new_keys(len(named)), named)]
        self._ns_of = {id(k.param): k for k in self._ns_keys}
        for k in self._ns_keys:     # every worker, the same order: the keys' ids agree
            dtype = numpy_dtype(k.param, f"parameter {k.name!r}")
            self._ns_client.init(k.key, np.zeros(k.param.numel(), dtype))
        self._ns_hooks = [k.param.register_post_accumulate_grad_hook(self._ns_ready)
                          for k in self._ns_keys if k.param.requires_grad]

    def _ns_ready(self, param) -> None:
        """A post-accumulate-grad hook: ``param.grad`` is complete for this pass."""
        k = self._ns_of[id(param)]
        k.passes += 1
        if k.passes == self._ns_passes:
            self._ns_push(k)

    def _ns_push(self, k: _Key) -> None:
        if k.handle is not None:
            raise TorchSessionError(
                f"parameter {k.name!r}: its gradient was complete again before step(): "
                f"more backward passes than backward_passes_per_step={self._ns_passes}")
        if k.param.grad is None:
            k.param.grad = torch.zeros_like(k.param)
        k.array, k.in_place = flat_view(k.param.grad, f"gradient of {k.name!r}")
        k.handle = self._ns_client.start_push(k.key, k.array, True)

    def synchronize(self) -> None:
        """Wait until every gradient is summed over all workers (pushing those backward did
        not produce), and write the sums (averaged if asked) into the gradients. ``step()``
        calls it unless it was called since the last step (then: clip the gradients
        between the two)."""
        for k in self._ns_keys:
            if k.handle is None:
                self._ns_push(k)
        for k in self._ns_keys:
            handle, k.handle, k.passes = k.handle, None, 0
            self._ns_client.finish_into(k.key, handle, k.array)
            write_back(k.param.grad, k.array, k.in_place)
            if self._ns_average and self._ns_size > 1:
                k.param.grad.div_(self._ns_size)
            k.array = None
        self._ns_synced = True

    def step(self, closure=None):
        if closure is not None:
            raise TorchSessionError("DistributedOptimizer.step takes no closure: run "
                                    "backward() before step()")
        if not self._ns_synced:
            self.synchronize()
        self._ns_synced = False
        return super().step()

    def remove_hooks(self) -> None:
        """Stop pushing gradients (the optimizer goes on stepping on local ones)."""
        for hook in self._ns_hooks:
            hook.remove()
        self._ns_hooks = []


def DistributedOptimizer(optimizer: torch.optim.Optimizer, named_parameters=None,
                         session: Session | None = None, average: bool = True,
                         backward_passes_per_step: int = 1) -> torch.optim.Optimizer:
    """``optimizer`` (the same object, now synchronizing; see the module doc) stepping on
    the gradients summed over every worker of ``session`` (:func:`~.session.init`), divided
    by their number when ``average``. ``backward_passes_per_step``: backward passes whose
    gradients accumulate locally before one push. Every worker must wrap the same
    parameters in the same order. Blocks while each key is declared to the DC server."""
    if session is None:
        raise TorchSessionError("DistributedOptimizer needs session= (netstorm.torch.init())")
    session.require_mode("DistributedOptimizer")
    if isinstance(optimizer, _Synchronized):
        raise TorchSessionError("this optimizer is a DistributedOptimizer already")
    if not (isinstance(backward_passes_per_step, int) and backward_passes_per_step >= 1):
        raise TorchSessionError(f"backward_passes_per_step must be an int >= 1, got "
                                f"{backward_passes_per_step!r}")
    named = named_parameters_of(optimizer, named_parameters)
    base = type(optimizer)
    optimizer.__class__ = type(base.__name__, (_Synchronized, base),
                               {"__module__": base.__module__,
                                "__doc__": f"{base.__name__}, synchronized by netstorm"})
    optimizer._netstorm_start(session, named, average, backward_passes_per_step)
    return optimizer
