"""When a node that stopped being heard is presumed dead: an adaptive silence deadline.

*Pure*: fed arrival times and round-trip times, it answers with a deadline; it owns no
clock, no socket, no thread (docs/recovery-detection.md).

A node's deadline is learnt from what was heard of it: the gaps between its heartbeats
(what keeps coming when it has nothing else to say), kept over the last :data:`WINDOW` gaps, and its
round-trip time as the scheduler measured it (a heartbeat's echoed timestamp). Once a node
was heard regularly (:data:`MIN_REGULAR` gaps: never during start-up, when 19 processes
importing MXNet on two cores starve one another), it is presumed dead after::

    max(floor_s, 2 * heartbeat_s,            # at least two beats missed
        mean + JITTER_K * stddev,            # far outside its usual gaps
        GAP_FACTOR * longest gap seen,       # a starved node's long gap raises the bar
        heartbeat_s + RTT_FACTOR * rtt)      # a long link's retransmissions
    capped at dead_after_s                   # the configured bound still holds

Before that, or with ``floor_s = 0`` (the adaptive deadline off), the deadline is
``dead_after_s``, the old fixed rule. Every update is O(1); a deadline is O(1) amortized
(O(WINDOW) to find the longest gap again, once each time the longest left the window).
"""
from __future__ import annotations

import collections
import math

__all__ = ["ArrivalHistory", "FailureDetector", "GAP_FACTOR", "JITTER_K", "MIN_REGULAR",
           "RTT_FACTOR", "RTT_WEIGHT", "WINDOW"]

WINDOW = 64             # the gaps remembered per node (32 s of 0.5 s beats)
MIN_REGULAR = 8         # gaps heard before the adaptive deadline applies
JITTER_K = 8.0          # mean + JITTER_K standard deviations of the gaps
GAP_FACTOR = 2.0        # the deadline is at least this many times the longest gap in WINDOW
RTT_FACTOR = 4.0        # ... and one heartbeat plus this many round trips
RTT_WEIGHT = 0.25       # the weight of a new round-trip sample in the running estimate


class ArrivalHistory:
    """The last :data:`WINDOW` gaps between one node's arrivals: their mean, standard
    deviation and longest. O(1) per arrival (running sums; the longest found again only
    once it left the window)."""

    __slots__ = ("last", "gaps", "_sum", "_sumsq", "_longest")

    def __init__(self, now: float):
        self.last = now
        self.gaps: collections.deque = collections.deque(maxlen=WINDOW)
        self._sum = self._sumsq = 0.0
        self._longest = 0.0             # None: to be found again (the longest left)

    def add(self, now: float) -> None:
        """An arrival at ``now`` (a clock going backwards adds a gap of 0)."""
        gap = max(0.0, now - self.last)
        self.last = max(self.last, now)
        if len(self.gaps) == self.gaps.maxlen:
            old = self.gaps[0]
            self._sum -= old
            self._sumsq -= old * old
            if old == self._longest:
                self._longest = None
        self.gaps.append(gap)
        self._sum += gap
        self._sumsq += gap * gap
        if self._longest is not None and gap > self._longest:
            self._longest = gap

    @property
    def mean(self) -> float:
        return self._sum / len(self.gaps) if self.gaps else 0.0

    @property
    def stddev(self) -> float:
        if len(self.gaps) < 2:
            return 0.0
        mean = self.mean
        return math.sqrt(max(0.0, self._sumsq / len(self.gaps) - mean * mean))

    @property
    def longest(self) -> float:
        """O(1), or O(WINDOW) once after the longest gap left the window."""
        if self._longest is None:
            self._longest = max(self.gaps, default=0.0)
        return self._longest


class FailureDetector:
    """Each node's silence deadline (see the module's docstring). ``dead_after_s``: the
    upper bound, and the deadline of a node not yet heard regularly; ``heartbeat_s``: how
    often the node beats; ``floor_s``: the least adaptive deadline (0: the adaptive
    deadline is off, every node gets ``dead_after_s``)."""

    def __init__(self, dead_after_s: float, heartbeat_s: float = 0.0, floor_s: float = 0.0):
        self.dead_after_s = float(dead_after_s)
        self.heartbeat_s = float(heartbeat_s)
        self.floor_s = float(floor_s)
        self._history: dict = {}        # node -> ArrivalHistory
        self._rtt: dict = {}            # node -> running round-trip estimate (s)

    @property
    def adaptive(self) -> bool:
        return self.floor_s > 0

    def heard(self, node, now: float) -> None:
        """Something of ``node`` arrived at ``now``. O(1)."""
        history = self._history.get(node)
        if history is None:
            self._history[node] = ArrivalHistory(now)
        else:
            history.add(now)

    def note_rtt(self, node, rtt_s: float) -> None:
        """A round trip to ``node`` took ``rtt_s`` (negative or non-finite: ignored). A
        running estimate that follows a longer round trip at once and a shorter one
        slowly, so a link that got slower never waits for the average. O(1)."""
        if not math.isfinite(rtt_s) or rtt_s < 0:
            return
        old = self._rtt.get(node)
        self._rtt[node] = rtt_s if old is None or rtt_s > old else \
            old + RTT_WEIGHT * (rtt_s - old)

    def rtt(self, node) -> float:
        """The round trip to ``node`` as estimated (0 until measured)."""
        return self._rtt.get(node, 0.0)

    def regular(self, node) -> bool:
        """Whether ``node`` was heard often enough for the adaptive deadline."""
        history = self._history.get(node)
        return history is not None and len(history.gaps) >= MIN_REGULAR

    def deadline(self, node) -> float:
        """The silence after which ``node`` is presumed dead. O(1) amortized."""
        if not self.adaptive or not self.regular(node):
            return self.dead_after_s
        history = self._history[node]
        learnt = max(self.floor_s, 2 * self.heartbeat_s,
                     history.mean + JITTER_K * history.stddev,
                     GAP_FACTOR * history.longest,
                     self.heartbeat_s + RTT_FACTOR * self.rtt(node))
        return min(self.dead_after_s, learnt)

    def forget(self, node) -> None:
        """``node`` is gone (lost, or replaced by a new process): a new process starts
        from scratch."""
        self._history.pop(node, None)
        self._rtt.pop(node, None)
