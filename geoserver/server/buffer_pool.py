"""Arrays a server reuses for its sums instead of allocating fresh ones every round.

A DC server sums its workers' pushes and its tree children's chunks into arrays of the same
few sizes every round. A fresh large array is fresh pages from the kernel: a page fault and
a zeroed page per 4 KiB (or 2 MiB huge page), every round. :class:`BufferPool` keeps the
arrays it made, up to ``per_shape`` of each (elements, dtype) and ``max_bytes`` in all (so
it holds what was in use at once at the busiest moment, a few rounds' chunks), and hands
one out again once nothing but the pool refers to it:
Python's reference count says so, since every holder of its memory holds a reference,
directly or through a view (a stored value, a round, a ZeroMQ frame still being sent:
pyzmq keeps the object until ZeroMQ is done with its bytes). An array handed out is the
caller's to overwrite whole; its old contents are garbage.
"""
from __future__ import annotations

import sys

import numpy as np

__all__ = ["BufferPool", "MAX_BYTES", "PER_SHAPE"]

PER_SHAPE = 256     # arrays kept per (elements, dtype): every chunk of a few rounds
MAX_BYTES = 1 << 30     # kept in all


def _unused(kept: list, i: int) -> bool:
    """Whether only ``kept`` refers to ``kept[i]`` (the other reference is the call's)."""
    return sys.getrefcount(kept[i]) == 2


class BufferPool:
    """O(``per_shape``) per :meth:`take` at worst, O(1) while the oldest array kept is free
    again first (arrays are looked at from where the last one was found)."""

    def __init__(self, per_shape: int = PER_SHAPE, max_bytes: int = MAX_BYTES):
        self.per_shape, self.max_bytes = per_shape, max_bytes
        self._kept: dict = {}       # (elements, dtype) -> [arrays]
        self._next: dict = {}       # (elements, dtype) -> where to look first
        self.kept_bytes = 0
        self.reused = self.made = 0

    def take(self, size: int, dtype) -> np.ndarray:
        """A flat array of ``size`` elements of ``dtype``, contents undefined."""
        shape = (size, np.dtype(dtype))
        kept = self._kept.setdefault(shape, [])
        first = self._next.get(shape, 0)
        for n in range(len(kept)):
            i = (first + n) % len(kept)
            if _unused(kept, i):
                self._next[shape] = i + 1
                self.reused += 1
                return kept[i]
        array = np.empty(size, dtype)
        self.made += 1
        if len(kept) < self.per_shape and self.kept_bytes + array.nbytes <= self.max_bytes:
            kept.append(array)
            self.kept_bytes += array.nbytes
        return array

    def add(self, a, b) -> np.ndarray:
        """``a + b`` in an array of the pool."""
        return np.add(a, b, out=self.take(len(a), a.dtype))

    def copy(self, a) -> np.ndarray:
        """A copy of ``a`` in an array of the pool."""
        out = self.take(len(a), a.dtype)
        out[:] = a
        return out
