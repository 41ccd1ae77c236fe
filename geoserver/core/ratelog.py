"""Rate-limited logging of bad input: at most a few lines per peer and interval.

Anything a remote peer can trigger at will (a malformed message, a chunk beyond a bound)
is logged through a :class:`RateLimitedLog`: each peer gets ``lines`` lines per
``interval_s``, all peers together ``total_lines``; what is held back is counted and the
count rides on that peer's next line. Pure logic with an explicit clock; memory is bounded
by ``max_peers`` (the least recently heard peer is forgotten first).
"""
from __future__ import annotations

import collections
import logging
import time

from ..config.settings import LOG_INTERVAL_S, LOG_LINES_PER_PEER

__all__ = ["RateLimitedLog"]


class _Window:
    __slots__ = ("start", "lines", "suppressed")

    def __init__(self, start: float):
        self.start, self.lines, self.suppressed = start, 0, 0


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, lines: int = LOG_LINES_PER_PEER,
                 interval_s: float = LOG_INTERVAL_S, total_lines: int = 10 * LOG_LINES_PER_PEER,
                 max_peers: int = 1024, clock=time.monotonic, level: int = logging.WARNING):
        self.logger = logger
        self.lines = lines
        self.interval_s = interval_s
        self.total_lines = total_lines
        self.max_peers = max_peers
        self.clock = clock
        self.level = level
        self._peers: collections.OrderedDict = collections.OrderedDict()
        self._all = _Window(clock())
        self.suppressed = 0           # lines held back so far, all peers
        self.count = 0                # calls so far, written or held back (the metrics)

    def log(self, peer, fmt: str, *args) -> bool:
        """Log ``fmt % args`` about ``peer`` unless its budget (or everyone's) is spent;
        True if the line was written."""
        self.count += 1
        now = self.clock()
        window = self._peers.pop(peer, None) or _Window(now)
        self._peers[peer] = window                     # most recently heard last
        while len(self._peers) > self.max_peers:
            self._peers.popitem(last=False)
        if now - window.start >= self.interval_s:
            window.start, window.lines = now, 0
        if now - self._all.start >= self.interval_s:
            self._all.start, self._all.lines = now, 0
        if window.lines >= self.lines or self._all.lines >= self.total_lines:
            window.suppressed += 1
            self.suppressed += 1
            return False
        window.lines += 1
        self._all.lines += 1
        if window.suppressed:
            fmt += " (%d similar lines about %s suppressed)"
            args = (*args, window.suppressed, peer)
            window.suppressed = 0
        self.logger.log(self.level, fmt, *args)
        return True
