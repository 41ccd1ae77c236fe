"""Quorum rounds on a DC's server (``[sync] quorum``, diloco and hfa with ``k2 = 1``;
docs/sync.md#quorum-rounds-not-waiting-for-a-late-dc-hfa-diloco): a WAN round completes with the DCs the scheduler named, and a DC that
was late merges its workers' deltas, once, into a later WAN round.

Pure logic, used by :class:`~netstorm.geoserver.server.sync_modes.HfaMode` (and so
``DilocoMode``) when the cluster runs quorum rounds.

**Two numberings.** Workers number their pushes as always: *DC round* ``r`` is a worker's
``r``-th synchronization. The WAN numbers *WAN rounds* (policies, trees, chunks, the
replica's ``applied``). A DC on time contributes its DC round ``r`` to WAN round ``r``; a DC
that was late contributes the DC rounds it has complete to the next WAN round not yet
decided, so its numbering may lag (by a round or two), and it catches up by covering two or
more DC rounds in one WAN round.

**What happens.** Every push goes to this DC's *pending* rounds (per key, per DC round).
When a key's DC rounds after the last one contributed (``claimed``) are complete through
``c``, this DC offers them for WAN round ``R`` = the next undecided (a QUORUM_READY ``R``
saying ``through = c``), and again whenever ``c`` grows before ``R`` is decided (a DC
behind catches up this way: its workers are answered at once). The scheduler's decision of
``R`` names the DCs in it and their weights (worker-rounds: ``workers x (c - claimed)``, from
its latest offer):

- **in it**: each key contributes the sum of its pending DC rounds ``claimed+1 .. c`` to
  ``R`` (``c`` as the weight says; a key whose rounds are not all in yet does once they
  are), and ``claimed = c``;
- **left out**: each key contributes zeros to ``R`` (the trees never wait for this DC);
  its pending rounds stay for the next offer.

A worker's pull of DC round ``r`` is answered once WAN round ``r`` was applied here, as
always: a late worker restarts from the newest weights at once, and can never run more than
one round ahead of the WAN. Every DC divides the tree's sum of ``R`` by the decision's total
weight (:meth:`ServerQuorum.total_weight`), so replicas stay bit-identical.

Why exactly once: a push is summed into its DC round's pending sum; a pending round is
contributed by the one decision that claims it (``claimed`` only grows) and then deleted;
a decision leaving this DC out claims nothing. What is pending when the run ends (a DC still
behind when the others finished: no WAN round is left to take it) is not merged;
:meth:`ServerQuorum.unmerged` counts it. Costs: O(workers + pending rounds) per push,
O(keys) per decision, O(rounds claimed) per contribution; memory: the pending rounds (a
key's size each; a DC that keeps up holds one per key).
"""
from __future__ import annotations

import numpy as np

from .store_keys import KeyEntry, Round

__all__ = ["ServerQuorum"]


class ServerQuorum:
    def __init__(self, store, ready):
        """``store``: the DC's KeyStore; ``ready(wan_round, through)``: offer this DC's DC
        rounds up to ``through`` for ``wan_round`` (a QUORUM_READY to the scheduler)."""
        self.store = store
        self._ready = ready
        self.pending: dict = {}     # key -> {DC round: Round} of pushes not contributed yet
        self.claimed = 0            # the latest DC round contributed (a decision took it)
        self.offers: dict = {}      # WAN round -> the DC round it was offered through
        self.decisions: dict = {}   # WAN round -> {DC: weight}, until every key applied it
        self.decided = 0            # the latest WAN round decided
        self.waiting: dict = {}     # key -> [(WAN round, first, through)]: contributions
                                    # waiting for its pushes of DC rounds first..through
        self.left_out = 0           # WAN rounds this DC was left out of (a statistic)
        self.merged = 0             # contributions that covered more than one DC round

    # ------------------------------------------------------------ pushes
    def take(self, entry: KeyEntry, rnd: int, array, worker: int) -> None:
        """``worker``'s push of DC round ``rnd`` of ``entry`` (its array copied or summed)."""
        rounds = self.pending.setdefault(entry.key, {})
        pending = rounds.get(rnd)
        if pending is None:
            rounds[rnd] = Round(local=np.array(array, dtype=entry.dtype, copy=True),
                                owned=True)
        else:
            np.add(pending.local, array, out=pending.local)
        rounds[rnd].pushed.add(worker)
        self._progress(entry)

    def check_push(self, entry: KeyEntry, rnd: int) -> str:
        """Why a push of DC round ``rnd`` cannot be taken ("" when it can): a worker pushes
        round ``rnd`` only after it received round ``rnd - 1``."""
        if rnd > entry.applied + 1:
            return (f"key {entry.key}: a worker pushes round {rnd} only after it received "
                    f"round {rnd - 1}; this DC applied {entry.applied}")
        return ""

    def _complete_through(self, entry: KeyEntry) -> int:
        """The last DC round of ``entry`` such that every one after ``claimed`` up to it was
        pushed by every local worker (``claimed``: none)."""
        rounds = self.pending.get(entry.key, {})
        through = self.claimed
        while through + 1 in rounds and rounds[through + 1].pushed >= self.store.workers:
            through += 1
        return through

    def _progress(self, entry: KeyEntry) -> None:
        """After a push: the key's waiting contribution may leave, and this DC may offer its
        complete rounds for the next WAN round."""
        waiting = self.waiting.get(entry.key, [])
        while waiting and self._pushed(entry, *waiting[0][1:]):
            self._send(entry, waiting[0][0], self._sum(entry, *waiting.pop(0)[1:]))
        if not waiting:
            self.waiting.pop(entry.key, None)
        self._offer(entry)

    def _offer(self, entry: KeyEntry) -> None:
        """Offer the key's complete rounds for the next undecided WAN round, and offer again
        each time more are complete before it is decided (the scheduler takes the latest).
        A DC behind is answered at once, so it completes rounds as fast as it computes and
        catches up within the window it is waited for."""
        wan_round = self.decided + 1
        through = self._complete_through(entry)
        if through > max(self.claimed, self.offers.get(wan_round, 0)):
            self.offers[wan_round] = through
            self._ready(wan_round, through)

    # ------------------------------------------------------------ the decision
    def refusal(self, wan_round: int, weights: dict) -> str:
        """Why the decision of ``wan_round`` cannot be this DC's ("" when it can): out of
        round order, or a weight for this DC that is not the rounds it offered."""
        if wan_round != self.decided + 1:
            return f"round {wan_round} decided after round {self.decided}"
        weight = weights.get(self.store.dc)
        if weight is None:
            return ""
        rounds, extra = divmod(weight, len(self.store.workers))
        offered = self.offers.get(wan_round, 0)
        if extra or rounds < 1 or self.claimed + rounds > offered:
            return (f"weight {weight} for {self.store.dc}, which has "
                    f"{len(self.store.workers)} workers and offered rounds "
                    f"{self.claimed + 1}..{offered}")
        return ""

    def decided_round(self, wan_round: int, weights: dict) -> None:
        """The scheduler decided ``wan_round``: this DC contributes what it offered, or,
        left out, zeros for every key. Decisions come in round order; a repeated or older
        one is ignored."""
        if wan_round <= self.decided:
            return
        self.decided = wan_round
        self.decisions[wan_round] = dict(weights)
        self.offers.pop(wan_round, None)
        keys = [e for e in self.store.keys.values() if e.value is not None]
        for entry in keys:      # the WAN may now run ahead of a worker that never pushed:
            for worker in self.store.workers:  # its first push is still its round 1
                entry.next_push.setdefault(worker, 1)
        if self.store.dc in weights:    # it covers the DC rounds its weight counts
            first = self.claimed + 1
            through = self.claimed = self.claimed + weights[self.store.dc] // \
                len(self.store.workers)
            self.merged += through > first
            for entry in keys:
                self._contribute(entry, wan_round, first, through)
        else:
            self.left_out += 1
            for entry in keys:
                self._send(entry, wan_round, np.zeros(entry.size, entry.dtype))
        for entry in keys:          # offer what is complete for the next round
            self._offer(entry)
        self._forget()

    def _contribute(self, entry: KeyEntry, wan_round: int, first: int, through: int) -> None:
        """``entry``'s pending DC rounds ``first..through`` as its contribution to
        ``wan_round``, or, not all pushed yet, once they are (in WAN round order)."""
        if entry.key in self.waiting or not self._pushed(entry, first, through):
            self.waiting.setdefault(entry.key, []).append((wan_round, first, through))
            return
        self._send(entry, wan_round, self._sum(entry, first, through))

    def _pushed(self, entry: KeyEntry, first: int, through: int) -> bool:
        """Every local worker pushed DC rounds ``first..through`` of ``entry``."""
        rounds = self.pending.get(entry.key, {})
        return all(r in rounds and rounds[r].pushed >= self.store.workers
                   for r in range(first, through + 1))

    def _sum(self, entry: KeyEntry, first: int, through: int):
        """The pending DC rounds ``first..through`` of ``entry``, summed and forgotten."""
        rounds = self.pending[entry.key]
        total = rounds.pop(first).local
        for r in range(first + 1, through + 1):
            total = total + rounds.pop(r).local
        return total

    def _send(self, entry: KeyEntry, wan_round: int, contribution) -> None:
        rnd = entry.rounds[wan_round] = Round(local=contribution, owned=True, prepared=True)
        self.store.to_wan(entry, wan_round, rnd)

    def unmerged(self) -> int:
        """The DC rounds pushed here (of any key) that no WAN round took yet."""
        return max((len(rounds) for rounds in self.pending.values()), default=0)

    def total_weight(self, wan_round: int, fallback: int) -> int:
        """What the WAN sum of ``wan_round`` is divided by: its decision's total weight
        (``fallback`` when none is known)."""
        weights = self.decisions.get(wan_round)
        return fallback if weights is None else sum(weights.values())

    def _forget(self) -> None:
        """Decisions every key applied. O(keys)."""
        applied = min((e.applied for e in self.store.keys.values()), default=0)
        for old in [r for r in self.decisions if r <= applied]:
            del self.decisions[old]
