"""Local optimizer steps on a worker, for sync modes ``hfa`` and ``esync`` (docs/sync.md).

Under these modes the worker runs the optimizer itself, on its own copy of each key's
weights. A step that synchronizes sends the key's *delta* since the last synchronization to
the DC server (through the same engine operator as a push with ``want_value``), and the
synchronized weights it gets back become both the worker's weights and the new base. Under
``hfa`` every ``k1``-th step synchronizes; under ``esync`` the DC server says, with each
synchronized value, how many steps to take before the next one.

Everything here is MXNet engine operations (asynchronous); the only wait is, under esync,
for the server's step count after the previous synchronization, which was already queued.
"""
from __future__ import annotations

from dataclasses import dataclass

import mxnet as mx

__all__ = ["LocalSteps", "LocalStepsError"]


class LocalStepsError(RuntimeError):
    """The script uses the store in a way a local-steps mode cannot serve."""


@dataclass
class _Local:
    weights: object         # NDArray the optimizer steps (in place)
    base: object            # NDArray: the weights at the last synchronization
    steps: int = 0          # optimizer steps taken on this key
    synced_at: int = 0      # the step of the last synchronization
    rounds: int = 0         # synchronizations sent


class LocalSteps:
    def __init__(self, sync, client, push_value):
        """``push_value(key_id, delta)``: the engine operation that pushes ``delta`` as the
        key's next round and returns an NDArray that will hold the value after it."""
        self.sync = sync
        self._client = client
        self._push_value = push_value
        self.updater = None
        self.keys: dict = {}

    def set_optimizer(self, optimizer) -> None:
        self.updater = mx.optimizer.get_updater(optimizer)

    def start(self, key_id: int, value) -> None:
        """The key's value after init (the servers' copy, rank 0's value)."""
        self.keys[key_id] = _Local(weights=value.copy(), base=value)

    def _due(self, local: _Local) -> bool:
        """Whether the step just taken ends with a synchronization."""
        if self.sync.mode == "hfa":
            return local.steps % self.sync.k1 == 0
        return local.steps - local.synced_at >= self._client.steps_after(local.rounds)

    def step(self, key_id: int, grad, outs=()) -> None:
        """One optimizer step of ``grad`` on the key's weights, synchronizing when due;
        the weights are copied into ``outs``."""
        if self.updater is None:
            raise LocalStepsError(
                f"sync mode {self.sync.mode!r} runs the optimizer on the workers: the store "
                f"needs it (gluon.Trainer: update_on_kvstore=True; Module: kvstore update)")
        local = self.keys[key_id]
        self.updater(key_id, grad, local.weights)
        local.steps += 1
        if self._due(local):
            value = self._push_value(key_id, local.weights - local.base)
            local.base, local.weights = value, value.copy()
            local.synced_at, local.rounds = local.steps, local.rounds + 1
        self.pull(key_id, outs)

    def pull(self, key_id: int, outs) -> None:
        for out in outs:
            self.keys[key_id].weights.copyto(out)

    def save_states(self, dump_optimizer: bool) -> bytes:
        if self.updater is None:
            raise LocalStepsError("save_optimizer_states: no optimizer set (set_optimizer)")
        return self.updater.get_states(dump_optimizer)

    def load_states(self, data: bytes) -> None:
        if self.updater is None:
            raise LocalStepsError("load_optimizer_states: no optimizer set (set_optimizer)")
        self.updater.set_states(data)
