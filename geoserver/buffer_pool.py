"""Arrays a server reuses for its sums instead of allocating fresh ones every round.

A DC server sums its workers' pushes and its tree children's chunks into arrays of the same
few sizes every round. A fresh large array is fresh pages from the kernel: a page fault and
a zeroed page per 4 KiB, every round. :class:`BufferPool` keeps up to ``per_shape`` arrays
of each (elements, dtype) and hands one out again once nothing but the pool refers to it:
Python's reference count says so, since every holder of its memory holds a reference,
directly or through a view (a stored value, a round, a ZeroMQ frame still being sent:
pyzmq keeps the object until ZeroMQ is done with its bytes). An array handed out is the
caller's to overwrite whole; its old contents are garbage.
"""
from __future__ import annotations

import sys

import numpy as np

PER_SHAPE = 4       # arrays kept per (elements, dtype): a round's sum, its total, the value
                    # in force and one still being sent


def _unused(kept: list, i: int) -> bool:
    """Whether only ``kept`` refers to ``kept[i]`` (the other reference is the call's)."""
    return sys.getrefcount(kept[i]) == 2


class BufferPool:
    """O(``per_shape``) per :meth:`take`; holds at most ``per_shape`` arrays per shape."""

    def __init__(self, per_shape: int = PER_SHAPE):
        self.per_shape = per_shape
        self._kept: dict = {}       # (elements, dtype) -> [arrays]
        self.reused = self.made = 0

    def take(self, size: int, dtype) -> np.ndarray:
        """A flat array of ``size`` elements of ``dtype``, contents undefined."""
        kept = self._kept.setdefault((size, np.dtype(dtype)), [])
        for i in range(len(kept)):
            if _unused(kept, i):
                self.reused += 1
                return kept[i]
        array = np.empty(size, dtype)
        self.made += 1
        if len(kept) < self.per_shape:
            kept.append(array)
        return array

    def add(self, a, b) -> np.ndarray:
        """``a + b`` in an array of the pool."""
        return np.add(a, b, out=self.take(len(a), a.dtype))

    def copy(self, a) -> np.ndarray:
        """A copy of ``a`` in an array of the pool."""
        out = self.take(len(a), a.dtype)
        out[:] = a
        return out
