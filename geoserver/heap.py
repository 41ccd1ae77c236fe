"""Giving memory back to the operating system after a large message was refused.

Parsing a hostile meta of up to 1 MiB (an object of 20,000 keys, a list nested 100,000
deep) briefly takes a few MiB; glibc's malloc then keeps them (it raises its mmap threshold
after such a peak and trims its heaps only past twice that), so every refused message of
that size would leave the node a little larger, never smaller. :class:`HeapReleaser` calls
glibc's ``malloc_trim(0)`` after such a message (at most once per ``min_interval_s``), which
returns free pages of every arena. Elsewhere than glibc it does nothing.
"""
from __future__ import annotations

import ctypes
import logging
import time

log = logging.getLogger(__name__)

RELEASE_AFTER_BYTES = 64 << 10      # refused messages at least this large trigger a release


class HeapReleaser:
    """:meth:`request` asks for the process's free heap pages to go back to the system;
    they go at once, or, within ``min_interval_s`` of the last release, at the first
    :meth:`poll` after it (so the last of a burst of large messages is released too).
    O(heap size) per release (glibc walks every arena), a few ms for a node's heap."""

    def __init__(self, min_interval_s: float = 1.0, clock=time.monotonic):
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.releases = 0
        self.pending = False
        self._last = float("-inf")
        self._trim = _malloc_trim()

    def request(self) -> None:
        self.pending = self._trim is not None
        self.poll()

    def poll(self) -> bool:
        """Release now if one was requested and the interval has passed; True if so."""
        if not self.pending or self.clock() - self._last < self.min_interval_s:
            return False
        self._trim(0)
        self._last = self.clock()
        self.pending = False
        self.releases += 1
        return True


def _malloc_trim():
    """glibc's ``malloc_trim`` from the symbols already loaded (no library search, which
    would start ``ldconfig``); None elsewhere than glibc."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):     # not glibc (musl, macOS): nothing to trim
        log.debug("no malloc_trim: refused messages' memory stays with malloc")
        return None
