"""The replica side of a DC's :class:`~netstorm.geoserver.server.local_store.KeyStore`
(docs/recovery.md): what a frozen DC reports of its keys, the replicas it sends a peer, a
peer's it adopts, and the replay of the rounds after them.

A collaborator the store holds (``store.replicas``) and
:class:`~netstorm.geoserver.server.recovery.ServerRecovery` drives; it works on the store's
records (:mod:`.store_keys`) and optimizer through the store's public helpers (``known``,
``entry``, ``to_wan``, ``answer_pulls``, its sync mode's ``needed``). :meth:`report` and
:meth:`replay` are O(keys + rounds in flight), :meth:`of` and :meth:`adopt` O(bytes).
"""
from __future__ import annotations

from . import mode_replica, replica
from ..model.optimizer_host import OptimizerHost, OptimizerSpecError

__all__ = ["StoreReplicas"]


class StoreReplicas:
    def __init__(self, store):
        self.store = store
        self.frozen = False         # a lost DC's server is being replaced: nothing goes to
                                    # the WAN until the replay (docs/recovery.md)
        self.replayed = False       # this DC replayed rounds after a replacement

    def ahead(self, entry, rnd: int) -> bool:
        """Whether a push of round ``rnd`` may come before round ``rnd - 1`` of ``entry``
        is applied here: only after a replacement (this DC replayed), when that round is in
        flight here. A lost server a round ahead of every survivor had answered round
        ``rnd - 1``, so its workers pushed ``rnd`` and send both again to the replacement
        (the local modes otherwise take round ``rnd`` only after ``rnd - 1``). O(1)."""
        return self.replayed and rnd == entry.applied + 2 and rnd - 1 in entry.rounds

    def freeze(self) -> None:
        """Nothing more goes to the WAN until :meth:`replay`."""
        self.frozen = True

    def applied(self, key: int) -> int:
        """The rounds of ``key`` applied here; -1 for a key without a value here."""
        entry = self.store.keys.get(key)
        return entry.applied if entry is not None and entry.value is not None else -1

    def undo_last(self, key: int, rnd: int) -> bool:
        """An odd replica one round ahead of the majority's (a replica audit's repair,
        docs/recovery-audit.md): put ``key`` back at round ``rnd``, its last applied round
        waiting to be summed again (its workers' sum was kept); False if it cannot be."""
        entry = self.store.keys.get(key)
        if entry is None or entry.kept is None or entry.applied != rnd + 1:
            return False
        entry.rounds[entry.applied], entry.kept = entry.kept, None
        entry.applied = rnd
        return True

    def report(self) -> list:
        """``[[key, rounds applied, digest of its value]]``: what a frozen DC offers."""
        return [[e.key, e.applied, replica.digest(e.value)] for e in self.store.keys.values()
                if e.value is not None]

    def of(self, keys) -> tuple:
        """``(meta, frames)`` of a STATE message with this DC's replica of ``keys``."""
        store = self.store
        entries = [store.known(k) for k in keys]
        reps = [replica.KeyReplica(e.key, e.applied, e.shape, e.dtype, e.sparse, e.value)
                for e in entries]
        states = store.optimizer.key_states(keys) if store.optimizer is not None else None
        return replica.encode(reps, store.spec if store.optimizer else None, states,
                              mode_replica.export(store.mode, keys))

    def adopt(self, replicas: list, spec, states_meta, state_frames, mode_arrays=None) -> None:
        """Take a peer's replica of some keys (checked by :func:`replica.decode`): their
        values and rounds, their optimizer states (the optimizer is built from the peer's
        spec if this server has none yet) and the sync mode's own state
        (:mod:`.mode_replica`)."""
        store = self.store
        # every key's shape and dtype checked before any is taken
        entries = [store.entry(rep.key, rep.shape, rep.dtype) for rep in replicas]
        try:
            mode_replica.adopt(store.mode, {r.key for r in replicas}, mode_arrays or {},
                               {r.key: r.shape for r in replicas})
        except mode_replica.ModeStateError as exc:
            raise replica.ReplicaError(str(exc)) from exc
        for entry, rep in zip(entries, replicas):
            entry.value = entry.base = rep.value
            entry.applied, entry.sparse = rep.round, rep.sparse
            entry.init_gen = max(entry.init_gen, 1)
        if spec is None:
            return
        try:
            if store.optimizer is None or spec != store.spec:   # an odd replica takes the
                store.optimizer, store.spec = OptimizerHost(spec), spec    # majority's
            store.optimizer.merge_states(states_meta, state_frames, [r.key for r in replicas])
        except (OptimizerSpecError, ValueError) as exc:
            raise replica.ReplicaError(f"cannot take the peer's optimizer: {exc}") from exc

    def replay(self, rounds: dict) -> None:
        """Every key is at ``rounds[key]`` (its own or a peer's replica): the rounds after it
        go to the WAN again, under the replay policy, once their pushes are all here; pulls
        now answerable are answered."""
        self.frozen, self.replayed = False, True
        store = self.store
        for entry in store.keys.values():
            entry.applied = rounds.get(entry.key, entry.applied)
            for rnd_no in sorted(entry.rounds):
                rnd = entry.rounds[rnd_no]
                if rnd_no <= entry.applied:
                    del entry.rounds[rnd_no]
                    continue
                rnd.layout, rnd.total, rnd.chunks_done = [], None, 0
                if rnd.pushed >= store.mode.needed(entry.key, rnd_no):
                    store.to_wan(entry, rnd_no, rnd)
            store.mode.settled(entry)       # esync: rounds without the workers that left
            store.answer_pulls(entry)
