"""Local optimizer steps on a worker, for sync modes ``hfa``, ``esync`` and ``diloco``
(docs/sync.md).

Under these modes the worker runs the optimizer itself, on its own copy of each key's
weights. A step that synchronizes sends the key's *delta* since the last synchronization to
the DC server (through the same engine operator as a push with ``want_value``), and the
synchronized weights it gets back become both the worker's weights and the new base. Under
``hfa`` every ``k1``-th step synchronizes; under ``esync`` the DC server says, with each
synchronized value, how many steps to take before the next one; under ``diloco`` every
``h``-th step (the servers apply the outer optimizer to the average).

Streaming ``diloco`` (``fragments`` P > 1 or ``delay`` τ > 0): the keys are cut into P
fragments of about equal bytes, in key order (groups of layers, :func:`fragments_of`);
fragment p synchronizes at inner steps ``p·h/P + n·h``. Its synchronized weights are not
waited for: the worker goes on for τ steps and then mixes them in,
``w ← mix·w + (1 − mix)·w_global``, and the next delta is taken from ``w_global``.

Everything here is MXNet engine operations (asynchronous); the only waits are, under esync,
for the server's step count after the previous synchronization, which was already queued,
and under diloco for a synchronized value that is used (at once, or τ steps later).
Per step O(key size); fragments are assigned once, O(keys).
"""
from __future__ import annotations

from dataclasses import dataclass

import mxnet as mx

from netstorm.geoserver.config.local_restart import steps_per_round

__all__ = ["LocalSteps", "LocalStepsError", "fragments_of", "resumed_steps"]


class LocalStepsError(RuntimeError):
    """The script uses the store in a way a local-steps mode cannot serve."""


def resumed_steps(sync, rounds: int) -> int:
    """The local steps behind ``rounds`` synchronizations of one worker (``h`` per round
    under diloco, ``k1`` under hfa); raises :class:`LocalStepsError` under a mode whose
    steps per round vary (esync), unless ``rounds`` is 0."""
    if not rounds:
        return 0
    per_round = steps_per_round(sync)
    if per_round is None or sync.streaming:
        raise LocalStepsError(f"sync mode {sync.mode!r}: a worker restarted after {rounds} "
                              f"round(s) cannot tell how many local steps they were")
    return rounds * per_round


@dataclass
class _Local:
    weights: object         # NDArray the optimizer steps (in place)
    base: object            # NDArray: the weights at the last synchronization
    steps: int = 0          # optimizer steps taken on this key
    synced_at: int = 0      # the step of the last synchronization
    rounds: int = 0         # synchronizations sent
    pending: object = None  # streaming: the synchronized value not merged yet
    merge_at: int = 0       # streaming: the step after which it is merged


def fragments_of(sizes: dict, count: int) -> dict:
    """Key -> fragment (0..count-1): the keys in order, cut into ``count`` runs of about
    equal elements (each key whole; a fragment may be empty when one key outweighs the
    rest). The same on every worker, since every worker has the same keys. O(keys)."""
    total = sum(sizes.values()) or 1
    out, seen = {}, 0
    for key in sorted(sizes):
        out[key] = min(count - 1, seen * count // total)
        seen += sizes[key]
    return out


class LocalSteps:
    def __init__(self, sync, client, push_value):
        """``push_value(key_id, delta)``: the engine operation that pushes ``delta`` as the
        key's next round and returns an NDArray that will hold the value after it."""
        self.sync = sync
        self._client = client
        self._push_value = push_value
        self.updater = None
        self.keys: dict = {}
        self._offsets = None        # diloco: key -> its fragment's inner step (mod h)
        self._updated: dict = {}    # key -> the array its latest inner step wrote (one per
                                    # key, so nothing accumulates if nobody waits)

    def set_optimizer(self, optimizer) -> None:
        self.updater = mx.optimizer.get_updater(optimizer)

    def start(self, key_id: int, value, rounds: int = 0) -> None:
        """The key's value after init (the servers' copy, rank 0's value). ``rounds``: for
        a worker restarted into its rank (docs/recovery-localrestart.md), the rounds of the
        key its rank had synchronized; ``value`` is then the DC's model after them, taken
        as weights and base, and the local step counter starts at ``rounds`` x the steps
        per round (the inner optimizer's state starts fresh)."""
        steps = resumed_steps(self.sync, rounds)
        self.keys[key_id] = _Local(weights=value.copy(), base=value, steps=steps,
                                   synced_at=steps, rounds=rounds)
        self._offsets = None

    def _offset(self, key_id: int) -> int:
        """diloco: the inner step (mod h) at which ``key_id``'s fragment synchronizes
        (fragments are assigned at the first step, when every key is known)."""
        if self.sync.fragments == 1:
            return 0
        if self._offsets is None:
            parts = fragments_of({k: v.weights.size for k, v in self.keys.items()},
                                 self.sync.fragments)
            self._offsets = {k: p * self.sync.h // self.sync.fragments
                             for k, p in parts.items()}
        return self._offsets[key_id]

    def _due(self, key_id: int, local: _Local) -> bool:
        """Whether the step just taken ends with a synchronization."""
        if self.sync.mode == "hfa":
            return local.steps % self.sync.k1 == 0
        if self.sync.mode == "diloco":
            return (local.steps - self._offset(key_id)) % self.sync.h == 0
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
        self._updated[key_id] = local.weights
        local.steps += 1
        if local.pending is not None and local.steps >= local.merge_at:
            self._merge(local)
        if self._due(key_id, local):
            value = self._push_value(key_id, local.weights - local.base)
            local.synced_at, local.rounds = local.steps, local.rounds + 1
            if self.sync.mode == "diloco" and self.sync.delay:
                local.pending, local.merge_at = value, local.steps + self.sync.delay
            else:
                local.base, local.weights = value, value.copy()
        self.pull(key_id, outs)

    def wait_inner_steps(self) -> None:
        """Wait until the optimizer steps taken since the last call are computed (not for
        any synchronization they started): a training loop's compute, timed apart from
        its waits for the WAN."""
        for array in self._updated.values():
            array.wait_to_read()
        self._updated = {}

    def _merge(self, local: _Local) -> None:
        """Streaming: the synchronized value that arrived while the worker went on is mixed
        into its weights; the next delta is taken from it."""
        mix = self.sync.mix
        local.weights = mix * local.weights + (1.0 - mix) * local.pending
        local.base, local.pending = local.pending, None

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
