"""Quorum rounds on a DC's server (``[sync] quorum``, hfa and diloco; docs/sync-quorum.md):
a WAN round completes with the DCs the scheduler named, and this DC's workers' deltas of a
round it was left out of are merged, once, into the next round it is in.

Pure logic, used by :class:`~netstorm.geoserver.server.sync_modes.HfaMode` (and so
``DilocoMode``) when the cluster sets a quorum. What it does, per WAN round ``R`` (its last
DC round ``rnd_no``):

- **ready**: the first key whose round ``rnd_no`` every local worker pushed tells the
  scheduler (``ready(R)``, a QUORUM_READY); that key's round, and the others', wait here for
  the scheduler's decision (:meth:`ServerQuorum.hold`).
- **decided, in it**: every held round goes to the WAN, and later ones at once; this DC's
  contribution is its mode's plus the **carry** (the deltas of the rounds it missed), so it
  carries its decided weight (worker-rounds).
- **decided, left out**: this DC contributes zeros to ``R`` for every key (the trees never
  wait for its workers); what its workers pushed of ``rnd_no`` so far, and every later push
  of it (:meth:`ServerQuorum.take_late`), goes to the carry. Their pulls are answered once
  ``R`` is applied here: a late worker restarts from the newest weights, and its next push is
  ``rnd_no + 1``, as always. Under hfa the DC's local rounds' progress since the last WAN
  round joins the carry when ``R`` is applied (:meth:`ServerQuorum.carry_local`).
- **applied**: every DC divides the tree's sum by the decision's total weight
  (:meth:`ServerQuorum.total_weight`), the same number everywhere, so replicas stay
  bit-identical.

Why exactly once: a push of round ``rnd_no`` is summed either into the round this DC sends
(it was in ``R``) or into the carry (left out), never both, since the decision comes before
the round leaves and a round left out never leaves with pushes; the carry is emptied by the
one contribution that takes it. Costs: O(1) per push or check, O(keys) per decision (plus
O(key size) per zero round), O(key size) memory per key with a carry.
"""
from __future__ import annotations

import numpy as np

from .store_keys import KeyEntry, Round

__all__ = ["ServerQuorum"]


class ServerQuorum:
    def __init__(self, store, ready):
        """``store``: the DC's KeyStore; ``ready(wan_round)``: tell the scheduler this DC's
        round is ready (once per round)."""
        self.store = store
        self._ready = ready
        self.decisions: dict = {}   # WAN round -> {DC: weight} the scheduler decided
        self.reported = 0           # the latest WAN round said ready
        self.carry: dict = {}       # key -> the deltas of the rounds this DC was left out
        self.held: dict = {}        # WAN round -> [(entry, rnd_no)] waiting for the decision
        self.left_out = 0           # WAN rounds this DC was left out of (a statistic)
        self.merged = 0             # contributions that carried a late delta

    # ------------------------------------------------------------ what the mode asks
    def wan_round(self, rnd_no: int) -> int:
        return self.store.sync.wan_round(rnd_no)

    def is_left_out(self, rnd_no: int) -> bool:
        """Whether DC round ``rnd_no`` is a WAN round decided without this DC."""
        sync = self.store.sync
        weights = self.decisions.get(sync.wan_round(rnd_no))
        return sync.crosses_wan(rnd_no) and weights is not None and \
            self.store.dc not in weights

    def hold(self, entry: KeyEntry, rnd_no: int, rnd: Round) -> None:
        """Round ``rnd_no`` of ``entry`` (crossing the WAN) is ready here: to the WAN if this
        DC is in the decided round, else kept until the decision (telling the scheduler)."""
        wan_round = self.wan_round(rnd_no)
        if wan_round in self.decisions:
            self.store.to_wan(entry, rnd_no, rnd)
            return
        self.held.setdefault(wan_round, []).append((entry, rnd_no))
        if wan_round > self.reported:
            self.reported = wan_round
            self._ready(wan_round)

    def take_late(self, entry: KeyEntry, rnd_no: int, array) -> bool:
        """A push of ``rnd_no``: True when it goes to the carry (a round decided without this
        DC), the caller then only answers its pull once the round is applied here."""
        if not self.is_left_out(rnd_no):
            return False
        self._add(entry, array)
        return True

    def contribution(self, entry: KeyEntry, own):
        """This DC's contribution: ``own`` (its mode's, for this round) plus the carry."""
        carried = self.carry.pop(entry.key, None)
        if carried is None:
            return own
        self.merged += 1
        return own + carried

    def carry_local(self, entry: KeyEntry, since) -> None:
        """hfa: a WAN round this DC was left out of is applied here; ``since``, its local
        rounds' progress since the last WAN round (weighted by its workers), joins the carry
        instead of being overwritten."""
        self._add(entry, since)

    def total_weight(self, rnd_no: int, fallback: int) -> int:
        """What the WAN sum of ``rnd_no`` is divided by: its decision's total weight
        (``fallback``, the cluster's workers, when none is known: quorum off)."""
        weights = self.decisions.get(self.wan_round(rnd_no))
        return fallback if weights is None else sum(weights.values())

    # ------------------------------------------------------------ the decision
    def decided(self, wan_round: int, weights: dict) -> None:
        """The scheduler decided ``wan_round``: this DC's held rounds leave, or, left out, it
        contributes zeros for every key (its pushes so far go to the carry)."""
        if wan_round in self.decisions:
            return
        self.decisions[wan_round] = dict(weights)
        held = self.held.pop(wan_round, [])
        if self.store.dc in weights:
            for entry, rnd_no in held:
                rnd = entry.rounds.get(rnd_no)
                if rnd is not None and not rnd.layout:
                    self.store.to_wan(entry, rnd_no, rnd)
        else:
            self.left_out += 1
            rnd_no = wan_round * self.store.sync.rounds_per_wan_round
            for entry in self.store.keys.values():
                if entry.value is not None and entry.applied < rnd_no:
                    self._zero_round(entry, rnd_no)
        self._forget()

    def _zero_round(self, entry: KeyEntry, rnd_no: int) -> None:
        """Round ``rnd_no`` of ``entry`` leaves with zeros; what was pushed of it is carried."""
        rnd = entry.rounds.get(rnd_no)
        if rnd is not None and rnd.layout:
            return                  # already sent (cannot be: sent rounds were decided)
        pushed = set()
        if rnd is not None:
            pushed = rnd.pushed
            if rnd.local is not None:
                self._add(entry, rnd.local)
        zero = entry.rounds[rnd_no] = Round(local=np.zeros(entry.size, entry.dtype),
                                            pushed=pushed, owned=True, left_out=True)
        self.store.to_wan(entry, rnd_no, zero)

    def _add(self, entry: KeyEntry, array) -> None:
        """``array`` joins the key's carry (a new array: pushes' frames stay intact)."""
        carried = self.carry.get(entry.key)
        self.carry[entry.key] = np.array(array, dtype=entry.dtype, copy=True) \
            if carried is None else carried + array

    def _forget(self) -> None:
        """Decisions no key can ask for any more: rounds every key applied and every local
        worker pushed (a late push still needs its round's decision). O(keys x workers)."""
        if not self.store.keys:
            return
        done = min(min([e.applied] + [e.next_push.get(w, e.applied + 1) - 1
                                      for w in self.store.workers])
                   for e in self.store.keys.values())
        for old in [r for r in self.decisions if r < self.wan_round(done)]:
            del self.decisions[old]
