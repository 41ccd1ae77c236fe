"""Stalls: a worker silent on the data path while others wait on it or have finished, for
the scheduler's :class:`~netstorm.scheduler.liveness.Liveness` (docs/operations.md, *Stalls*).

Every worker's heartbeat says how long it has sent nothing to its server (``quiet_s``, 0
while a request of it waits), the rounds it pushed of each key, the oldest rounds it waits
for and its median seconds per round (:mod:`netstorm.geoserver.worker.progress`). From them
:class:`StallWatch` says who has not pushed a round a worker waits for (:meth:`verdict`,
told back to that worker, whose request names them if it times out) and which workers stall
(:meth:`stalls`): silent and not waiting themselves for :data:`STALL_ROUNDS` times the
median round (at least ``floor_s``; at most half of ``max_idle_s`` when that is set, so
the stall is reported before the run fails for it), while another worker waits for a round
they have not pushed, or has finished. Pure: the clock is the caller's. A report is
O(keys); a judgement O(workers) while no worker is silent, else O(workers x distinct rounds
waited for)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

__all__ = ["BARRIER", "MAX_NAMED", "Report", "STALL_ROUNDS", "Stall", "StallWatch"]

STALL_ROUNDS = 10       # silent this many median rounds while others wait: a stall
MAX_NAMED = 32          # workers named per round a worker waits for (the rest counted)
BARRIER = -1            # a barrier's key on the wire (geoserver/worker/progress.py)


@dataclass
class Report:
    """A worker's latest heartbeat, as the scheduler keeps it."""

    quiet_s: float = 0.0            # silent this long when it beat (0: a request waits)
    at: float = 0.0                 # when the beat came (the caller's clock)
    pushed: dict = field(default_factory=dict)     # key -> rounds pushed
    waits: tuple = ()               # (key or None, round) it waits for, oldest first
    round_s: float | None = None    # its median seconds per round

    def quiet(self, now: float) -> float:
        """How long it has been silent by ``now`` (0 while it waits)."""
        return self.quiet_s + (now - self.at) if self.quiet_s > 0 else 0.0


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


@dataclass(frozen=True)
class Stall:
    """Worker ``rank`` (``who``: ``dc/local rank``) silent ``quiet_s`` while the ranks
    ``waiting`` wait on it and those ``finished`` have finished."""

    node: int
    rank: int
    who: str
    quiet_s: float
    waiting: tuple = ()
    finished: tuple = ()

    def others(self) -> str:
        """``ranks 0, 2 wait on it, rank 3 finished``."""
        parts = []
        if self.waiting:
            verb = "wait" if len(self.waiting) > 1 else "waits"
            parts.append(f"{_ranks(self.waiting)} {verb} on it")
        if self.finished:
            parts.append(f"{_ranks(self.finished)} finished")
        return ", ".join(parts)

    def describe(self) -> str:
        """``stall: rank 1 (dc1/0) sent nothing for 40 s; ranks 0, 2 wait on it``."""
        return (f"stall: rank {self.rank} ({self.who}) sent nothing for {self.quiet_s:.0f} s; "
                f"{self.others()}")


class StallWatch:
    """The workers' data path, from their heartbeats. ``workers``: the cluster's worker
    nodes (``id``, ``rank``, ``dc``, ``local_rank``); ``floor_s``: the shortest silence
    called a stall; ``max_idle_s``: the silence that fails the run (0: none)."""

    def __init__(self, workers, floor_s: float, max_idle_s: float = 0.0):
        self.rank = {n.id: n.rank for n in workers}
        self.who = {n.id: f"{n.dc}/{n.local_rank}" for n in workers}
        self.floor_s, self.max_idle_s = floor_s, max_idle_s
        self.reports: dict = {}     # node id -> Report

    def heard(self, node_id: int, meta: dict, now: float) -> None:
        """A worker's heartbeat ``meta`` (checked by its kind's schema); a node that is no
        worker is ignored. O(keys)."""
        if node_id not in self.rank:
            return
        report = self.reports.setdefault(node_id, Report())
        report.quiet_s, report.at = float(meta.get("quiet_s", 0.0)), now
        if "pushed" in meta:
            report.pushed = {int(key): int(n) for n, keys in meta["pushed"] for key in keys}
        report.waits = tuple((None if key == BARRIER else int(key), int(rnd))
                             for key, rnd, _ in meta.get("waits", ()))
        if "round_s" in meta:
            report.round_s = float(meta["round_s"])

    def missing(self, needs: tuple, asking: int, finished, known=None) -> list:
        """The workers (ids) but ``asking`` and those ``finished`` that have not pushed
        round ``needs[1]`` of key ``needs[0]`` (key None: are not waiting at a barrier).
        ``known``: a dict keeping the answers of one judgement (the workers wait for the
        same few rounds). O(workers), or O(1) when known."""
        if known is None or needs not in known:
            key, rnd = needs
            lacking = []
            for node in self.rank:
                report = self.reports.get(node, Report())
                if node in finished:
                    continue
                if key is None and not any(k is None for k, _ in report.waits) or \
                        key is not None and report.pushed.get(key, 0) < rnd:
                    lacking.append(node)
            if known is None:
                return [n for n in lacking if n != asking]
            known[needs] = lacking
        return [n for n in known[needs] if n != asking]

    def name(self, node: int) -> str:
        """``dc1/0 (rank 1)``."""
        return f"{self.who[node]} (rank {self.rank[node]})"

    def verdicts(self, finished) -> dict:
        """What each waiting worker's next heartbeat tells it (node id -> meta): for each
        round it waits for, who has not pushed it. O(workers x distinct rounds waited
        for)."""
        known: dict = {}
        return {node: {"missing": [[BARRIER if key is None else key, rnd,
                                    self._named(self.missing((key, rnd), node, finished, known))]
                                   for key, rnd in report.waits]}
                for node, report in self.reports.items() if report.waits and node not in finished}

    def _named(self, nodes: list) -> list:
        """``nodes`` by name, at most :data:`MAX_NAMED` (then how many more)."""
        named = [self.name(n) for n in nodes[:MAX_NAMED]]
        return named + [f"{len(nodes) - MAX_NAMED} more workers"] if len(nodes) > MAX_NAMED \
            else named

    def threshold_s(self) -> float:
        """The silence that is a stall: :data:`STALL_ROUNDS` median rounds (over the
        workers' reports), at least ``floor_s``, at most half ``max_idle_s`` if set."""
        rounds = [r.round_s for r in self.reports.values() if r.round_s is not None]
        threshold = max(STALL_ROUNDS * statistics.median(rounds), self.floor_s) if rounds \
            else self.floor_s
        return min(threshold, self.max_idle_s / 2) if self.max_idle_s else threshold

    def stalls(self, now: float, finished) -> list:
        """The workers stalling now (:class:`Stall`, by rank): not finished, silent and not
        waiting for :meth:`threshold_s` or longer, while another worker waits for a round
        they have not pushed, or has finished."""
        threshold = self.threshold_s()
        silent = {node: report.quiet(now) for node, report in self.reports.items()
                  if node not in finished and not report.waits}
        silent = {node: quiet for node, quiet in silent.items() if quiet >= threshold}
        if not silent:
            return []
        waiting_on: dict = {}           # node -> ranks waiting for a round it lacks
        known: dict = {}
        for node, report in self.reports.items():
            if node in finished:
                continue
            for needs in report.waits:
                for culprit in self.missing(needs, node, finished, known):
                    waiting_on.setdefault(culprit, set()).add(self.rank[node])
        done = tuple(sorted(self.rank[n] for n in finished if n in self.rank))
        out = []
        for node, quiet in silent.items():
            waiting = tuple(sorted(waiting_on.get(node, ())))
            if waiting or done:
                out.append(Stall(node, self.rank[node], self.who[node], quiet, waiting, done))
        return sorted(out, key=lambda s: s.rank)
