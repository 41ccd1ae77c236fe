"""Quorum rounds at the scheduler (``[sync] quorum``, hfa and diloco; docs/sync.md#quorum-rounds-not-waiting-for-a-late-dc-hfa-diloco):
which DCs a WAN round completes with, and the weight each one's contribution carries.

Pure logic, no sockets, time passed in. A DC's server offers its workers' DC rounds up to
``through`` for WAN round ``r`` (QUORUM_READY; on time ``through = r``, a DC that was late
offers fewer, and more as it catches up: geoserver/server/quorum_rounds.py);
:meth:`QuorumRounds.ready` records it (the first offer's time, the latest ``through``).
Round ``r``'s **grace window** opens when ``min_dcs`` DCs offered and closes when every DC
did, or after the grace: ``grace_s`` when set, otherwise derived from what was measured
(:meth:`QuorumRounds.grace`). When it closes, the round's decision (:class:`Decision`) goes
to every server: the DCs in it and their weights; the others contribute zeros and keep their
workers' deltas for a later round. A DC behind (``through < r``) does not close a window
early: it may raise its offer within the grace and catch up.

**Weights** are worker-rounds: a DC of ``n`` workers whose offer covers its DC rounds after
``p`` (the last it contributed) through ``c`` carries ``n x (c - p)``, so a late update is
merged once, weighted by the inner steps (samples, at equal batches) it holds. Every server
divides the tree's sum by the same total weight, so replicas stay bit-identical.

Rounds are decided in order; an offer for a round already decided (a DC left out) is
ignored; one for a later round than the next undecided is kept until its turn. Costs:
:meth:`ready` O(DCs) (+ O(H log H) for the median, H = :data:`HISTORY`), :meth:`due` O(DCs)
per decision; memory O(DCs + H).
"""
from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass

__all__ = ["GRACE_FACTOR", "GRACE_FLOOR_S", "GRACE_SHARE", "HISTORY", "MEASURED_ROUNDS",
           "Decision", "QuorumError", "QuorumRounds"]

GRACE_FACTOR = 2.0      # the window: this many times the recent median lag ...
GRACE_SHARE = 0.5       # ... but at most this share of the recent median round period
GRACE_FLOOR_S = 0.005   # ... and at least this (a lag of 0 is measurement noise)
HISTORY = 16            # rounds whose lag and period are kept
MEASURED_ROUNDS = 2     # until this many rounds were measured, a round waits for every DC


class QuorumError(ValueError):
    """A quorum setting that cannot be used (the text names it)."""


@dataclass(frozen=True)
class Decision:
    """WAN round ``round`` completes with the DCs of ``weights`` (DC -> worker-rounds its
    contribution carries); the DCs not named contribute nothing to it."""

    round: int
    weights: dict

    @property
    def total(self) -> int:
        return sum(self.weights.values())

    def to_meta(self) -> dict:
        return {"weights": dict(sorted(self.weights.items()))}


class QuorumRounds:
    def __init__(self, workers: dict, min_dcs: int, grace_s: float = 0.0):
        """``workers``: DC name -> its workers; ``min_dcs``: the fewest DCs a round completes
        with (1..DCs); ``grace_s``: a fixed window (0: derived from measurements)."""
        if not workers or any(n < 1 for n in workers.values()):
            raise QuorumError(f"quorum rounds need DCs with workers, got {workers!r}")
        if not 1 <= min_dcs <= len(workers):
            raise QuorumError(f"[sync] quorum = {min_dcs}: must be 1..{len(workers)} "
                              f"(the cluster's DCs)")
        self.workers = dict(workers)
        self.min_dcs = min_dcs
        self.grace_s = grace_s
        self.decided = 0                        # the latest round decided
        self.covered = {dc: 0 for dc in workers}    # DC -> the last DC round it contributed
        self.running = set(workers)             # DCs whose workers have not all finished
        self._ready: dict = {}                  # round -> {DC: (when, through)}: its latest
                                                # offer
        self._opened: dict = {}                 # round -> when its window opened
        self.lags = collections.deque(maxlen=HISTORY)       # window open -> last arrival
        self.periods = collections.deque(maxlen=HISTORY)    # window open -> next's open
        self._last_open: float | None = None
        self.late = 0                           # DC-rounds left out so far (a statistic)

    # ------------------------------------------------------------ what servers say
    def ready(self, dc: str, rnd: int, now: float, through: int | None = None) -> list:
        """``dc`` offers its DC rounds up to ``through`` (default ``rnd``) for WAN round
        ``rnd`` at ``now``: the decisions due (a window that closed before ``now`` closes
        without it; the next round's once every DC offered it on time). A round already
        decided, a DC unknown, or an offer of nothing new or of rounds ahead of ``rnd`` is
        ignored; a later offer raises ``through`` (and its time, which the lags measure)."""
        decisions = self.due(now)
        through = rnd if through is None else through
        if dc not in self.workers or rnd <= self.decided or \
                not self.covered[dc] < through <= rnd:
            return decisions
        arrived = self._ready.setdefault(rnd, {})
        if through > arrived.get(dc, (now, 0))[1]:
            arrived[dc] = (now, through)
        self._open_windows(now)
        return decisions + self.due(now)

    def _open_windows(self, now: float) -> None:
        """The next undecided round's window opens once ``min_dcs`` DCs are ready."""
        rnd = self.decided + 1
        arrived = self._ready.get(rnd, {})
        needed = max(1, min(self.min_dcs, len(self.running)))
        if rnd not in self._opened and len(arrived) >= needed:
            opened = sorted(t for t, _ in arrived.values())[needed - 1]
            self._opened[rnd] = opened
            if self._last_open is not None:
                self.periods.append(max(0.0, opened - self._last_open))
            self._last_open = opened

    def finished(self, dc: str, now: float) -> list:
        """Every worker of ``dc`` finished: rounds no longer wait for it, and a quorum
        needs at most the DCs still running (a DC still behind when the others finished
        has its last rounds merged alone). The decisions now due."""
        self.running.discard(dc)
        self._open_windows(now)
        return self.due(now)

    # ------------------------------------------------------------ the window
    def grace(self) -> float:
        """How long a window stays open after ``min_dcs`` DCs are ready: ``grace_s`` when
        set; until :data:`MEASURED_ROUNDS` rounds were measured, unbounded (every DC is
        waited for, as without quorum); then :data:`GRACE_FACTOR` x the median lag of the
        last :data:`HISTORY` rounds (from the window's opening to the last DC that made it),
        at most :data:`GRACE_SHARE` x their median period, at least :data:`GRACE_FLOOR_S`."""
        if self.grace_s:
            return self.grace_s
        if len(self.lags) < MEASURED_ROUNDS or not self.periods:
            return float("inf")
        lag = GRACE_FACTOR * statistics.median(self.lags)
        return max(GRACE_FLOOR_S, min(lag, GRACE_SHARE * statistics.median(self.periods)))

    def deadline(self) -> float | None:
        """When the open window closes (None: no window open)."""
        opened = self._opened.get(self.decided + 1)
        return None if opened is None else opened + self.grace()

    def due(self, now: float) -> list:
        """The decisions due at ``now``, in round order: a round every DC still running
        offered on time (through the round itself: a DC behind may still catch up), or
        whose window has closed."""
        out = []
        while True:
            rnd = self.decided + 1
            arrived = self._ready.get(rnd, {})
            if rnd not in self._opened:
                return out
            everyone = all(arrived.get(dc, (0, 0))[1] == rnd for dc in self.running)
            if not everyone and now < self._opened[rnd] + self.grace():
                return out
            out.append(self._decide(rnd, arrived, everyone))
            self._open_windows(now)

    def _decide(self, rnd: int, arrived: dict, everyone: bool) -> Decision:
        opened = self._opened.pop(rnd)
        del self._ready[rnd]
        if everyone:            # a censored lag (a DC left out) says nothing of the spread
            self.lags.append(max(0.0, max(t for t, _ in arrived.values()) - opened))
        weights = {dc: self.workers[dc] * (through - self.covered[dc])
                   for dc, (_, through) in sorted(arrived.items())}
        for dc, (_, through) in arrived.items():
            self.covered[dc] = through
        self.late += len(self.workers) - len(arrived)
        self.decided = rnd
        return Decision(rnd, weights)
