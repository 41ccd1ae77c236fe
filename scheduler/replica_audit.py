"""The scheduler's comparison of the DCs' replicas (docs/recovery-audit.md).

Pure logic, no sockets, no clock. Every DC server sends, on its heartbeats, ``[key, round,
digest, updates]`` rows: the SHA-256 of its replica of ``key`` right after ``round``, at a
round boundary where every DC holds the same value, and the optimizer's update count of
the key (-1: no server optimizer). :class:`ReplicaAudit` gathers the rows per (key, round)
and compares each once every expected DC reported it:

- **mismatch**: the DCs hold different (digest, update count) pairs. The DCs sharing the
  pair of a strict majority of those compared are the majority, the others are odd; with no
  strict majority (e.g. two DCs that differ) there is no majority.
- **count error**: a DC's update count of a key minus the round has changed since its first
  audit of the key (a lost or doubled optimizer update shows there even when every replica
  agrees). The first audit fixes that offset: 0 when the optimizer was set before the first
  round, the checkpoint's round in a run resumed from one. A count lower than the DC's
  previous one for the key is a new optimizer (the script set one again, counting from
  0): it starts a new offset instead.

A round's audit is finished (:class:`RoundAudit`, one ``replica_audit`` stats record) once
each of its keys was compared and every expected DC has reported a later round; a round
with a mismatch is finished at once, so the run acts on it at once. At most
``keep_rounds`` rounds wait for their DCs: a DC that stopped reporting (a lost server)
makes the oldest one finish with the DCs that did. Keys of a round that report after it
finished (rare: a heartbeat cut between a DC's keys of one round) make a second record of
that round. O(rows) per report; O(DCs) per (key, round) compared.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

__all__ = ["KEEP_ROUNDS", "MAX_WAITING", "CountError", "Mismatch", "ReplicaAudit", "RoundAudit"]

KEEP_ROUNDS = 8         # audited rounds waiting for their DCs at most
MAX_WAITING = 1 << 18   # digests held before a new (key, round) is dropped (~60 MB)


@dataclass(frozen=True)
class Mismatch:
    """Key ``key`` after round ``round``: ``odd`` DCs differ from the ``majority`` (empty:
    no strict majority, then ``odd`` is every DC compared). ``held``: ``{dc: (digest,
    updates)}``."""

    key: int
    round: int
    odd: tuple
    majority: tuple
    held: dict = field(compare=False, repr=False, default_factory=dict)

    def describe(self) -> str:
        def pair(dc):
            digest, updates = self.held[dc]
            count = "" if updates < 0 else f", {updates} updates"
            return f"{dc} (SHA-256 {digest[:12]}...{count})"
        if not self.majority:
            return (f"the replicas of key {self.key} after round {self.round} differ "
                    f"between {' and '.join(map(pair, self.odd))}, and no strict majority "
                    f"agrees")
        return (f"the replica of key {self.key} after round {self.round} in "
                f"{', '.join(map(pair, self.odd))} differs from the majority "
                f"{', '.join(self.majority)} ({pair(self.majority[0])})")

    def to_json(self) -> dict:
        return {"key": self.key, "odd": list(self.odd), "majority": list(self.majority)}


@dataclass(frozen=True)
class CountError:
    """``dc`` applied ``updates`` optimizer updates of ``key`` by round ``round``; its
    earlier audits say ``expected``."""

    dc: str
    key: int
    round: int
    updates: int
    expected: int

    def describe(self) -> str:
        what = "lost" if self.updates < self.expected else "doubled"
        return (f"{self.dc}'s optimizer applied {self.updates} updates of key {self.key} by "
                f"round {self.round}, {self.expected} expected: an update was {what}")

    def to_json(self) -> dict:
        return {"dc": self.dc, "key": self.key, "updates": self.updates,
                "expected": self.expected}


@dataclass
class RoundAudit:
    """What the audit of one round found: ``keys`` compared, across at least ``dcs`` DCs
    each (the fewest any key was compared across)."""

    round: int
    keys: int = 0
    dcs: int = 0
    mismatches: list = field(default_factory=list)
    count_errors: list = field(default_factory=list)

    def record(self) -> dict:
        """Its stats record (without the time, which the caller adds)."""
        return {"event": "replica_audit", "round": self.round, "keys": self.keys,
                "dcs": self.dcs, "mismatches": [m.to_json() for m in self.mismatches],
                "count_errors": [c.to_json() for c in self.count_errors]}


def compare(key: int, rnd: int, held: dict) -> Mismatch | None:
    """The mismatch among ``held`` = ``{dc: (digest, updates)}`` of ``key`` after ``rnd``,
    or None when they all agree. O(DCs)."""
    groups: dict = collections.defaultdict(list)
    for dc in sorted(held):
        groups[held[dc]].append(dc)
    if len(groups) <= 1:
        return None
    largest = max(groups.values(), key=len)
    if 2 * len(largest) > len(held):
        odd = tuple(sorted(dc for dc in held if dc not in largest))
        return Mismatch(key, rnd, odd, tuple(largest), dict(held))
    return Mismatch(key, rnd, tuple(sorted(held)), (), dict(held))


class ReplicaAudit:
    def __init__(self, dcs, keep_rounds: int = KEEP_ROUNDS, max_waiting: int = MAX_WAITING):
        """``dcs``: the DCs whose servers report; ``max_waiting``: with this many digests
        held, a (key, round) not yet waiting is dropped (a server naming keys no other DC
        has cannot grow the scheduler; those waiting still complete)."""
        self.dcs = frozenset(dcs)
        self.keep_rounds, self.max_waiting = keep_rounds, max_waiting
        self.waiting = 0                # digests held
        self.dropped = 0                # digests not held: too many waiting
        self._rounds: dict = {}         # round -> {key: {dc: (digest, updates)}}
        self._audits: dict = {}         # round -> its RoundAudit so far
        self._latest: dict = {}         # dc -> the latest round it reported
        self._offsets: dict = {}        # (dc, key) -> (updates - round, updates) as of its
                                        # first audit (offset) and its latest (updates)
        self._ignored: dict = {}        # key -> rounds up to this are not compared

    def report(self, dc: str, rows) -> list:
        """``dc``'s rows ``[[key, round, digest, updates]]`` (checked by the heartbeat's
        schema); the :class:`RoundAudit` s this finishes, oldest first."""
        if dc not in self.dcs:
            return []
        touched = set()
        for key, rnd, digest, updates in rows:
            key, rnd, updates = int(key), int(rnd), int(updates)
            if rnd <= self._ignored.get(key, 0):
                continue
            group = self._rounds.get(rnd, {}).get(key)
            new = group is None or dc not in group
            if group is None and self.waiting >= self.max_waiting:
                self.dropped += 1
                continue
            held = self._rounds.setdefault(rnd, {}).setdefault(key, {})
            self.waiting += new
            held[dc] = (str(digest), updates)
            self._audits.setdefault(rnd, RoundAudit(rnd))
            self._latest[dc] = max(self._latest.get(dc, 0), rnd)
            touched.add((key, rnd))
        for key, rnd in sorted(touched):
            if set(self._rounds[rnd][key]) >= self.dcs:
                self._compare(key, rnd)
        done = []
        for rnd in sorted(self._rounds):
            audit = self._audits[rnd]
            if audit.mismatches:            # acted on now; keys still waiting are not
                done.append(self._finish(rnd, partial=False))   # compared with some DCs
            elif not self._rounds[rnd] and all(self._latest.get(d, 0) > rnd
                                               for d in self.dcs):
                done.append(self._finish(rnd))
        while len(self._rounds) > self.keep_rounds:
            done.append(self._finish(min(self._rounds)))
        return sorted(done, key=lambda a: a.round)

    def finish(self) -> list:
        """Every round still waiting, compared across the DCs that reported it (the end of
        the run)."""
        return [self._finish(rnd) for rnd in sorted(self._rounds)]

    def _compare(self, key: int, rnd: int) -> None:
        """Compare ``key`` after ``rnd`` across the DCs that reported it; it leaves the
        round's waiting keys."""
        held = self._rounds[rnd].pop(key)
        self.waiting -= len(held)
        audit = self._audits[rnd]
        audit.keys += 1
        audit.dcs = len(held) if audit.keys == 1 else min(audit.dcs, len(held))
        mismatch = compare(key, rnd, held)
        if mismatch is not None:
            audit.mismatches.append(mismatch)
        for dc, (_, updates) in sorted(held.items()):
            if updates < 0:
                continue
            offset, last = self._offsets.get((dc, key), (updates - rnd, -1))
            if updates - rnd != offset and updates >= last:
                audit.count_errors.append(CountError(dc, key, rnd, updates, rnd + offset))
            # each error counted once; a count that went down is a new optimizer (the
            # script set one again): it starts a new baseline
            self._offsets[(dc, key)] = (updates - rnd, updates)

    def _finish(self, rnd: int, partial: bool = True) -> RoundAudit:
        """Round ``rnd``'s audit; with ``partial`` its keys not every DC reported are
        compared across those that did (two at least), else they are left uncompared."""
        for key in sorted(self._rounds[rnd]):
            if partial and len(self._rounds[rnd][key]) >= 2:
                self._compare(key, rnd)
        self.waiting -= sum(len(held) for held in self._rounds.pop(rnd).values())
        return self._audits.pop(rnd)

    def forget(self, rounds: dict, dcs=()) -> None:
        """A replacement copied replicas: key ``k`` restarts from ``rounds[k]`` everywhere,
        so what was reported of it up to that round is not compared (``dcs`` may hold
        pre-copy digests of it), and ``dcs``' update counts start afresh (theirs were
        copied). O(keys + rounds waiting)."""
        for key, rnd in rounds.items():
            self._ignored[int(key)] = max(self._ignored.get(int(key), 0), int(rnd))
        for rnd in list(self._rounds):
            for key in [k for k in self._rounds[rnd] if rnd <= self._ignored.get(k, 0)]:
                self.waiting -= len(self._rounds[rnd].pop(key))
            if not self._rounds[rnd] and not self._audits[rnd].keys:
                del self._rounds[rnd], self._audits[rnd]
        for dc, key in [p for p in self._offsets if p[0] in set(dcs)]:
            del self._offsets[(dc, key)]
