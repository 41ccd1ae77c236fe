"""Giving memory back to the operating system: large buffers, and what a refused message
left.

:func:`return_large_buffers` (called once at a server's or the scheduler's start) has glibc
map buffers of 4 MiB or more on their own, so they go back when freed.

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

__all__ = ["HeapReleaser", "LARGE_BUFFER_BYTES", "M_MMAP_THRESHOLD", "RELEASE_AFTER_BYTES",
           "return_large_buffers"]

log = logging.getLogger(__name__)

RELEASE_AFTER_BYTES = 64 << 10      # refused messages at least this large trigger a release
M_MMAP_THRESHOLD = -3               # glibc mallopt parameter
LARGE_BUFFER_BYTES = 4 << 20        # buffers from this size are mapped and unmapped whole


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
        self._trim = _glibc("malloc_trim")

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


def return_large_buffers() -> bool:
    """Make glibc map every allocation of :data:`LARGE_BUFFER_BYTES` or more on its own and
    give it back to the system when freed. By default glibc raises that threshold to the
    largest buffer freed so far, so a node that once received a large frame (a worker's push
    of a large tensor, or a stranger's 1 GiB message, which is refused only after ZeroMQ
    read it) keeps that memory for good. Buffers below the threshold (WAN chunks) are
    unaffected. Returns False where this is not glibc (nothing changed)."""
    mallopt = _glibc("mallopt")
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES))


def _glibc(name: str):
    """glibc's function ``name`` from the symbols already loaded (no library search, which
    would start ``ldconfig``); None elsewhere than glibc."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):     # not glibc (musl, macOS): nothing to tune
        log.debug("no %s: malloc keeps its own settings", name)
        return None
