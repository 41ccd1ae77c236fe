"""One strategy object per synchronization mode of a DC's
:class:`~netstorm.geoserver.server.local_store.KeyStore` (docs/sync.md).

The store holds one :class:`SyncMode`, made once by :func:`create` from the cluster's
:class:`~netstorm.geoserver.config.sync.SyncConfig` (the registry :data:`MODES`), and calls
it wherever the modes differ instead of asking which mode is in force:

- ``fsa`` (:class:`FsaMode`, also what the others share): a round goes to the WAN once
  every local worker pushed it; its global sum is stepped by the optimizer (or becomes the
  value).
- ``hfa`` (:class:`HfaMode`): pushes are model deltas; a round that does not cross the WAN
  adds the DC's average to the weights, one that does sends the DC's delta since the last
  WAN round (weighted by its workers) and sets the weights to that round's plus the
  average over every worker. No server optimizer.
- ``diloco`` (:class:`DilocoMode`): every round crosses the WAN; the average of every
  worker's delta is the negative pseudo-gradient, which an outer Nesterov step
  (:class:`OuterNesterov`) applies to the last round's weights, identically in every DC.
- ``esync`` (:class:`EsyncMode`): ``hfa`` with one DC round per WAN round; the rounds after a
  worker finished go on without it (the local step counts are
  :class:`~netstorm.geoserver.server.esync.StepBalancer`'s, in the server).
- ``mixed`` (:class:`MixedMode`): a round is applied at once and travels to the other DCs
  through the :class:`~netstorm.geoserver.server.mixed_sync.MixedExchange` it wraps.

A mode reads and writes the store's records (:mod:`.store_keys`) and calls back its public
helpers (``to_wan``, ``apply_complete``, ``answer_pulls``). Costs: the checks and
``answerable`` are O(1) (``mixed``: O(DCs)), ``needed`` O(local workers), applying or
sending a round O(key size), esync's :meth:`EsyncMode.settled` O(rounds in flight x
workers) per key. Memory: diloco keeps one momentum buffer per key (the model's size once).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..config.settings import MAX_EARLY_MESSAGES, MAX_HELD_BYTES_PER_PEER
from ..config.sync import SyncConfig
from ..core.wire import Message
from .mixed_sync import MixedError
from .quorum_rounds import ServerQuorum
from .store_keys import KeyEntry, RequestError, Round

__all__ = ["DilocoMode", "EsyncMode", "FsaMode", "HfaMode", "MODES", "MixedMode",
           "OuterNesterov", "SyncMode", "create"]


@runtime_checkable
class SyncMode(Protocol):
    """What the store asks of its synchronization mode."""

    def check_push(self, entry: KeyEntry, rnd: int) -> None:
        """Raise :class:`RequestError` if a push of round ``rnd`` cannot be taken now."""

    def check_optimizer(self) -> None:
        """Raise :class:`RequestError` if the servers take no optimizer in this mode."""

    def needed(self, key: int, rnd: int) -> set:
        """The local workers round ``rnd`` of ``key`` waits for."""

    def round_ready(self, entry: KeyEntry, rnd_no: int, rnd: Round) -> None:
        """Every local worker the round needs pushed it: apply it here, or send it on."""

    def took_push(self, entry: KeyEntry, rnd: int, array, worker: int) -> bool:
        """Quorum rounds: True when ``worker``'s push of round ``rnd`` was taken by the
        quorum (:class:`ServerQuorum`); the store then only answers its pull."""

    def contribution(self, entry: KeyEntry, rnd: Round):
        """What this DC sends the WAN for round ``rnd`` (a flat array)."""

    def apply(self, entry: KeyEntry, done: Round) -> None:
        """Apply one complete round to ``entry``'s value."""

    def answerable(self, entry: KeyEntry) -> int:
        """The latest round whose pulls may be answered."""

    def settled(self, entry: KeyEntry) -> None:
        """The complete rounds of ``entry`` were applied and its pulls answered."""

    def value_known(self, entry: KeyEntry) -> None:
        """``entry`` has its initial value (from an INIT)."""

    def optimizer_set(self) -> None:
        """The servers' optimizer was set."""

    def worker_left(self, worker: int, pushes: dict, everyone: bool) -> None:
        """A worker finished (WORKER_LEFT, esync)."""

    def on_update(self, msg: Message, sender_dc: str) -> None:
        """Another DC's round of a key (UPDATE, mixed)."""


class FsaMode:
    """``fsa``, fully synchronous, and the behaviour the other modes share."""

    def __init__(self, sync: SyncConfig, store, exchange=None):
        """``exchange``: mixed's; no other mode takes one (:func:`create` checks)."""
        self.sync, self.store = sync, store

    def check_push(self, entry: KeyEntry, rnd: int) -> None:
        pass

    def check_optimizer(self) -> None:
        pass

    def needed(self, key: int, rnd: int) -> set:
        return self.store.workers

    def round_ready(self, entry: KeyEntry, rnd_no: int, rnd: Round) -> None:
        self.store.to_wan(entry, rnd_no, rnd)

    def took_push(self, entry: KeyEntry, rnd: int, array, worker: int) -> bool:
        return False

    def contribution(self, entry: KeyEntry, rnd: Round):
        """The sum of the DC's workers' pushes."""
        return rnd.local

    def apply(self, entry: KeyEntry, done: Round) -> None:
        """An optimizer step on the round's total, or the total becomes the value."""
        optimizer = self.store.optimizer
        if optimizer is not None:
            entry.value = optimizer.update(
                entry.key, done.total.reshape(entry.shape), entry.value.reshape(entry.shape),
                sparse=entry.sparse)
        else:
            entry.value = done.total

    def answerable(self, entry: KeyEntry) -> int:
        return entry.applied

    def settled(self, entry: KeyEntry) -> None:
        pass

    def value_known(self, entry: KeyEntry) -> None:
        pass

    def optimizer_set(self) -> None:
        pass

    def worker_left(self, worker: int, pushes: dict, everyone: bool) -> None:
        """Only esync goes on without a worker (the server passes WORKER_LEFT on under
        esync only); any other mode logs and ignores it."""
        self.store.drops.log("left", "%s: ignored a worker leaving under sync mode %r",
                             self.store.dc, self.sync.mode)

    def on_update(self, msg: Message, sender_dc: str) -> None:
        """Only mixed takes other DCs' updates; any other mode logs and drops them."""
        self.store.drops.log(sender_dc, "%s: dropped update of key %d from %s: sync mode "
                             "is %r", self.store.dc, msg.key, sender_dc, self.sync.mode)


class HfaMode(FsaMode):
    """``hfa``: the workers run the optimizer and push model deltas; every
    ``rounds_per_wan_round``-th DC round crosses the WAN. The model moves by the workers'
    *average* delta (model averaging; ``esync`` keeps the sum): a DC round by its own
    workers' average, a WAN round by every worker's, so a DC's WAN contribution is its
    delta since the last WAN round times its workers (a DC of two workers counts twice).
    With quorum rounds (``quorum``, a :class:`ServerQuorum`; ``k2 = 1``) the quorum takes
    every push, decides what this DC sends each WAN round, and the sum is divided by the
    decision's total weight."""

    def __init__(self, sync: SyncConfig, store, exchange=None):
        super().__init__(sync, store)
        ready = getattr(store, "quorum_ready", None)
        self.quorum = ServerQuorum(store, ready) if ready and sync.quorum_rounds else None

    def check_push(self, entry: KeyEntry, rnd: int) -> None:
        if self.quorum is not None:
            problem = self.quorum.check_push(entry, rnd)
            if problem:
                raise RequestError(problem)
        elif rnd != entry.applied + 1 and not self.store.replicas.ahead(entry, rnd):
            raise RequestError(f"key {entry.key}: under sync mode {self.sync.mode!r} a worker "
                               f"pushes round {rnd} only after it received round {rnd - 1}; "
                               f"this DC applied {entry.applied}")

    def check_optimizer(self) -> None:
        raise RequestError(f"under sync mode {self.sync.mode!r} workers run the optimizer "
                           f"themselves; the servers take none")

    def took_push(self, entry: KeyEntry, rnd: int, array, worker: int) -> bool:
        if self.quorum is None:
            return False
        self.quorum.take(entry, rnd, array, worker)
        return True

    def round_ready(self, entry: KeyEntry, rnd_no: int, rnd: Round) -> None:
        """A round that does not cross the WAN is complete at once."""
        if self.sync.crosses_wan(rnd_no):
            self.store.to_wan(entry, rnd_no, rnd)
        else:
            rnd.local_only = True
            self.store.apply_complete(entry)

    def _mean(self, summed, count: int):
        """``summed`` over ``count`` workers: their average (hfa), or the sum (esync)."""
        if not self.sync.averaged:
            return summed
        return summed / np.asarray(count, summed.dtype)

    def contribution(self, entry: KeyEntry, rnd: Round):
        """The DC's delta since the last WAN round (its local rounds' averages plus this
        round's), weighted by its workers: the WAN round's total over every worker is then
        the average of every worker's delta. Quorum rounds prepare it themselves."""
        if rnd.prepared:
            return rnd.local
        since = self._since_wan(entry)
        return rnd.local if since is None else since + rnd.local

    def _since_wan(self, entry: KeyEntry):
        """The DC's local rounds' progress since the last WAN round, weighted by its workers
        (None: none)."""
        if entry.value is entry.base:
            return None
        since = entry.value - entry.base
        if self.sync.averaged:
            since = since * np.asarray(len(self.store.workers), since.dtype)
        return since

    def _divisor(self, entry: KeyEntry) -> int:
        """What the WAN round being applied is divided by: the workers of the DCs its
        policy spans (every worker but in an elastic run), or with quorum rounds its
        decision's total weight."""
        wan_round = self.sync.wan_round(entry.applied + 1)
        if self.quorum is None:
            return self.store.contributors(wan_round)
        return self.quorum.total_weight(wan_round, self.store.all_workers)

    def apply(self, entry: KeyEntry, done: Round) -> None:
        if done.local_only:                 # a DC round of its workers' model deltas
            entry.value = entry.value + self._mean(done.local, len(self.store.workers))
        else:                               # the WAN round of every worker's delta
            entry.value = entry.base = entry.base + self._mean(done.total,
                                                               self._divisor(entry))


class OuterNesterov:
    """DiLoCo's outer optimizer: SGD with Nesterov momentum on the pseudo-gradient ``g``
    (PyTorch's ``SGD(nesterov=True)``): ``b = m·b + g``, ``w -= lr·(g + m·b)``; with
    ``m = 0`` and ``lr = 1`` it sets the weights to the workers' average. Deterministic
    float arithmetic in the key's dtype, so every DC computes the same bits from the same
    total. One buffer per key; O(key size) per step."""

    def __init__(self, lr: float, momentum: float):
        self.lr, self.momentum = lr, momentum
        self.buffers: dict = {}     # key -> momentum buffer

    def step(self, key: int, weights, grad):
        """The weights after one outer step of ``grad`` (new arrays; inputs untouched)."""
        lr = np.asarray(self.lr, grad.dtype)
        if self.momentum == 0:
            return weights - lr * grad
        m = np.asarray(self.momentum, grad.dtype)
        buf = self.buffers.get(key)
        buf = grad.copy() if buf is None else m * buf + grad
        self.buffers[key] = buf
        return weights - lr * (grad + m * buf)


class DilocoMode(HfaMode):
    """``diloco``: each round (one push per ``h`` inner steps, or per fragment) crosses the
    WAN; the pseudo-gradient is the last round's weights minus every worker's average,
    applied by :class:`OuterNesterov` to the last round's weights. The workers' inner
    optimizers never leave them."""

    def __init__(self, sync: SyncConfig, store, exchange=None):
        super().__init__(sync, store)
        self.outer = OuterNesterov(sync.outer_lr, sync.outer_momentum)

    def apply(self, entry: KeyEntry, done: Round) -> None:
        mean = self._mean(done.total, self._divisor(entry))     # average delta
        entry.value = entry.base = self.outer.step(entry.key, entry.base, -mean)


class EsyncMode(HfaMode):
    """``esync``: ``hfa`` with every DC round a WAN round, going on without the workers
    that finished."""

    def __init__(self, sync: SyncConfig, store, exchange=None):
        super().__init__(sync, store)
        self.departed: dict = {}    # local worker -> {key: rounds it pushed} once it
                                    # finished; later rounds go on without it
        self.all_departed = False   # every worker of every DC finished

    def needed(self, key: int, rnd: int) -> set:
        """All local workers but those that finished before round ``rnd``."""
        return {w for w in self.store.workers
                if w not in self.departed or rnd <= self.departed[w].get(key, 0)}

    def worker_left(self, worker: int, pushes: dict, everyone: bool) -> None:
        """Local worker ``worker`` finished after pushing ``pushes[key]`` rounds of each
        key (``everyone``: it was the last worker anywhere). Rounds after those go on
        without it: a round whose other workers all pushed is complete now, and a DC with
        no worker left contributes nothing (zeros) to the WAN rounds the others go on with,
        one round at a time."""
        self.all_departed = everyone
        if worker in self.store.workers:
            self.departed[worker] = pushes
        for entry in list(self.store.keys.values()):
            self.settled(entry)

    def settled(self, entry: KeyEntry) -> None:
        if not self.departed or entry.value is None:
            return
        for rnd_no, rnd in sorted(entry.rounds.items()):
            if not rnd.layout and not rnd.local_only and \
                    rnd.pushed >= self.needed(entry.key, rnd_no):
                self.round_ready(entry, rnd_no, rnd)
        nxt = entry.applied + 1
        if nxt not in entry.rounds and not self.needed(entry.key, nxt) and \
                not self.all_departed:
            rnd = entry.rounds[nxt] = Round(local=np.zeros(entry.size, entry.dtype),
                                            owned=True)
            self.round_ready(entry, nxt, rnd)


class MixedMode(FsaMode):
    """``mixed``: a round is applied here at once and sent to the other DCs; theirs are
    applied on arrival (:class:`~netstorm.geoserver.server.mixed_sync.MixedExchange`)."""

    def __init__(self, sync: SyncConfig, store, exchange):
        super().__init__(sync, store)
        self.exchange = exchange
        self._early_updates: list = []  # (message, sender DC) of keys not known yet
        self._early_bytes: dict = {}    # sender DC -> bytes of those kept

    def check_push(self, entry: KeyEntry, rnd: int) -> None:
        if self.store.optimizer is None:
            raise RequestError("sync mode 'mixed' applies every DC's update on the servers: "
                               "set an optimizer first (gluon.Trainer: update_on_kvstore=True; "
                               "Module: the default kvstore update)")

    def round_ready(self, entry: KeyEntry, rnd_no: int, rnd: Round) -> None:
        entry.value = self.exchange.on_local(entry.key, rnd_no, rnd.local, entry.value)
        entry.applied = rnd_no
        del entry.rounds[rnd_no]
        self.store.answer_pulls(entry)

    def answerable(self, entry: KeyEntry) -> int:
        return self.exchange.answerable(entry.key)

    def value_known(self, entry: KeyEntry) -> None:
        self.exchange.begin(entry.key, entry.value)
        self._replay_updates(entry.key)

    def optimizer_set(self) -> None:
        """Other DCs' updates that came before the optimizer are applied now."""
        for entry in self.store.keys.values():
            if entry.value is not None:
                entry.value = self.exchange.catch_up(entry.key, entry.value)
                self.store.answer_pulls(entry)

    def on_update(self, msg: Message, sender_dc: str) -> None:
        """Another DC's round of a key, from ``sender_dc`` (which the exchange checks may
        pass on its origin's updates); one that cannot be taken is logged and dropped."""
        store = self.store
        origin = str(msg.meta.get("origin"))
        entry = store.keys.get(msg.key)
        if entry is None or entry.value is None:    # its value is still on its way here
            nbytes = self._early_bytes.get(sender_dc, 0) + sum(len(f) for f in msg.frames)
            if len(self._early_updates) < MAX_EARLY_MESSAGES and \
                    nbytes <= MAX_HELD_BYTES_PER_PEER:
                self._early_updates.append((msg, sender_dc))
                self._early_bytes[sender_dc] = nbytes
                return
            problem = f"key {msg.key} is not initialized here, and too much waits for it"
        else:
            problem, arrays = "", msg.arrays()
            if msg.dtype != entry.dtype or len(arrays) != 1 or len(arrays[0]) != entry.size:
                problem = f"key {msg.key} has {entry.size} x {entry.dtype}"
        try:
            if problem:
                raise MixedError(problem)
            entry.value = self.exchange.on_remote(msg.key, msg.seq, origin, sender_dc,
                                                  arrays[0], entry.value,
                                                  store.optimizer is not None)
        except MixedError as exc:
            store.drops.log(sender_dc, "%s: dropped update of key %d round %d (origin %s) "
                            "from %s: %s", store.dc, msg.key, msg.seq, origin, sender_dc, exc)
            return
        store.answer_pulls(entry)

    def _replay_updates(self, key: int) -> None:
        """The updates of ``key`` that came before its initial value, now known."""
        early = [u for u in self._early_updates if u[0].key == key]
        self._early_updates = [u for u in self._early_updates if u[0].key != key]
        for msg, sender_dc in early:
            self._early_bytes[sender_dc] -= sum(len(f) for f in msg.frames)
            self.on_update(msg, sender_dc)


MODES = {"fsa": FsaMode, "hfa": HfaMode, "mixed": MixedMode, "esync": EsyncMode,
         "diloco": DilocoMode}
"""The registry: mode name (``SyncConfig.mode``) -> its strategy class."""


def create(sync: SyncConfig, store, exchange=None) -> SyncMode:
    """The strategy of ``sync``'s mode for ``store``; ``exchange``: the cluster's
    :class:`~netstorm.geoserver.server.mixed_sync.MixedExchange`, given under ``mixed``
    and only then."""
    if (exchange is not None) != sync.asynchronous:
        raise ValueError(f"sync mode {sync.mode!r} takes "
                         f"{'a' if sync.asynchronous else 'no'} MixedExchange")
    return MODES[sync.mode](sync, store, exchange)
