"""The replica side of a DC's :class:`~netstorm.geoserver.local_store.KeyStore`
(docs/recovery.md): what a frozen DC reports of its keys, the replicas it sends a peer, a
peer's it adopts, and the replay of the rounds after them.

A base class of ``KeyStore``: it works on the store's keys, optimizer and round helpers
(``_known``, ``_entry``, ``_needed``, ``_to_wan``, ``_answer_pulls``).
"""
from __future__ import annotations

from . import replica
from ..model.optimizer_host import OptimizerHost, OptimizerSpecError


class KeyStoreReplicas:
    def report(self) -> list:
        """``[[key, rounds applied, digest of its value]]``: what a frozen DC offers."""
        return [[e.key, e.applied, replica.digest(e.value)] for e in self.keys.values()
                if e.value is not None]

    def replicas(self, keys) -> tuple:
        """``(meta, frames)`` of a STATE message with this DC's replica of ``keys``."""
        entries = [self._known(k) for k in keys]
        reps = [replica.KeyReplica(e.key, e.applied, e.shape, e.dtype, e.sparse, e.value)
                for e in entries]
        states = self.optimizer.key_states(keys) if self.optimizer is not None else None
        return replica.encode(reps, self._spec if self.optimizer else None, states)

    def adopt(self, replicas: list, spec, states_meta, state_frames) -> None:
        """Take a peer's replica of some keys (checked by :func:`replica.decode`): their
        values and rounds, and their optimizer states (the optimizer is built from the
        peer's spec if this server has none yet)."""
        # every key's shape and dtype checked before any is taken
        entries = [self._entry(rep.key, rep.shape, rep.dtype) for rep in replicas]
        for entry, rep in zip(entries, replicas):
            entry.value = entry.base = rep.value
            entry.applied, entry.sparse = rep.round, rep.sparse
            entry.init_gen = max(entry.init_gen, 1)
        if spec is None:
            return
        try:
            if self.optimizer is None:
                self.optimizer, self._spec = OptimizerHost(spec), spec
            self.optimizer.merge_states(states_meta, state_frames, [r.key for r in replicas])
        except (OptimizerSpecError, ValueError) as exc:
            raise replica.ReplicaError(f"cannot take the peer's optimizer: {exc}") from exc

    def replay(self, rounds: dict) -> None:
        """Every key is at ``rounds[key]`` (its own or a peer's replica): the rounds after it
        go to the WAN again, under the replay policy, once their pushes are all here; pulls
        now answerable are answered."""
        self.hold_wan = False
        for entry in self.keys.values():
            entry.applied = rounds.get(entry.key, entry.applied)
            for rnd_no in sorted(entry.rounds):
                rnd = entry.rounds[rnd_no]
                if rnd_no <= entry.applied:
                    del entry.rounds[rnd_no]
                    continue
                rnd.layout, rnd.total, rnd.chunks_done = [], None, 0
                if rnd.pushed >= self._needed(entry.key, rnd_no):
                    self._to_wan(entry, rnd_no, rnd)
            self._answer_pulls(entry)
