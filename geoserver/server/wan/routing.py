"""Which way this DC's messages to a neighbour DC go: direct, split over relays, or detoured.

* Multipath: the scheduler's relay plan (:mod:`netstorm.scheduler.multipath`) says, per direction
  this DC -> v, which fraction of each chunk travels through which relay DC w. The parts
  are cut in proportion (chunks under ``min_split_bytes`` stay whole).
* Failure: a neighbour whose link stalled (:meth:`SendQueue.stalled`) is reached through the
  relay with the widest two-hop path among the links this DC knows, until ``revive_s``
  later the direct link is tried again.

A relay only forwards: it sends a relayed part straight on, or around its own stalled link
(at most :data:`MAX_HOPS` relays). Pure logic with an explicit clock.
"""
from __future__ import annotations

__all__ = ["MAX_HOPS", "MIN_SPLIT_BYTES", "Router"]

MAX_HOPS = 3
MIN_SPLIT_BYTES = 64 * 1024     # chunks smaller than this are not split over relays


class Router:
    def __init__(self, dc: str, rates: dict, min_split_bytes: int = MIN_SPLIT_BYTES,
                 revive_s: float = 30.0):
        self.dc = dc
        self.rates = dict(rates)          # (a, b) -> Mbit/s of the links this DC knows
        self.relays: dict = {}            # v -> [(w, fraction)]
        self.stalled: dict = {}           # v -> when the direct link was given up
        self.min_split_bytes = min_split_bytes
        self.revive_s = revive_s

    def set_plan(self, relays, rates=None) -> None:
        """The scheduler's ``[[u, v, w, fraction], ...]`` (this DC's rows are kept) and,
        optionally, its current rates ``[[a, b, mbps], ...]``. Malformed rows are skipped."""
        plan: dict = {}
        for row in relays or ():
            if isinstance(row, list) and len(row) == 4 and row[0] == self.dc \
                    and isinstance(row[3], (int, float)) and 0 < row[3] < 1:
                plan.setdefault(str(row[1]), []).append((str(row[2]), float(row[3])))
        self.relays = {v: parts for v, parts in plan.items() if sum(f for _, f in parts) < 1}
        for row in rates or ():
            if isinstance(row, list) and len(row) == 3 and isinstance(row[2], (int, float)):
                self.rates[(str(row[0]), str(row[1]))] = float(row[2])

    def mark_stalled(self, v: str, now: float) -> str | None:
        """Give up the direct link to ``v``; the detour relay to use instead (or None)."""
        self.stalled[v] = now
        return self.detour(v, now)

    def is_stalled(self, v: str, now: float) -> bool:
        since = self.stalled.get(v)
        if since is not None and now - since >= self.revive_s:
            del self.stalled[v]           # try the direct link again
            return False
        return since is not None

    def detour(self, v: str, now: float, avoid=()) -> str | None:
        """The relay w maximising min(rate(me, w), rate(w, v)) over known links, skipping
        stalled neighbours and ``avoid``. O(known DCs)."""
        best = None
        for (a, w), first in self.rates.items():
            if a != self.dc or w == v or w in avoid or self.is_stalled(w, now):
                continue
            second = self.rates.get((w, v))
            if second and first > 0 and (best is None or min(first, second) > best[0]):
                best = (min(first, second), w)
        return None if best is None else best[1]

    def parts(self, v: str, elements: int, itemsize: int, now: float) -> list:
        """``[(via or None, start, stop), ...]`` covering ``[0, elements)``: how to send one
        chunk to ``v`` (via None: direct)."""
        if self.is_stalled(v, now):
            return [(self.detour(v, now), 0, elements)]
        relays = self.relays.get(v)
        if not relays or elements * itemsize < self.min_split_bytes:
            return [(None, 0, elements)]
        segments = [(None, 1.0 - sum(f for _, f in relays))] + relays
        out, start, acc = [], 0, 0.0
        for i, (via, fraction) in enumerate(segments):
            acc += fraction
            stop = elements if i == len(segments) - 1 else min(elements, round(acc * elements))
            if stop > start:
                out.append((via, start, stop))
            start = max(start, stop)
        return out

    def next_hop(self, v: str, now: float, came_from=()) -> str | None:
        """Where a relayed part for ``v`` goes from here: ``v`` itself unless that link
        stalled, then a detour that is not where the part came from."""
        if not self.is_stalled(v, now):
            return v
        return self.detour(v, now, avoid=came_from)
