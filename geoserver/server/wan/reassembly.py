"""Reassembly of chunks that travelled in parts (multipath splits, detours around a failure).

A part names its chunk, its first element and the chunk's total length. Parts may overlap
(a part re-sent another way after a link stalled carries the same elements again): the
covered ranges are merged and a chunk is complete once they cover it. A part of a chunk
completed recently is recognised and dropped. Pure logic; O(parts of the chunk) per part.
The buffers of incomplete chunks are bounded per peer: a part that would start a chunk
beyond ``held_bytes`` of pending buffers for its peer is refused (:class:`PartError`).
"""
from __future__ import annotations

import collections
import logging

import numpy as np

from ...policy.chunking import ENTRY_BYTES
from ...config.settings import MAX_HELD_BYTES_PER_PEER

__all__ = ["PartError", "Reassembler"]

log = logging.getLogger(__name__)


class PartError(ValueError):
    """A part that cannot belong to a chunk (bad range or dtype); the text says why."""


class _Pending:
    def __init__(self, total: int, dtype, peer, cost: int):
        self.peer, self.cost = peer, cost
        self.buffer = np.empty(total, dtype=dtype)
        self.ranges: list = []        # merged, sorted [start, stop)

    def add(self, start: int, array) -> bool:
        stop = start + len(array)
        self.buffer[start:stop] = array
        merged = []
        for a, b in sorted(self.ranges + [(start, stop)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.ranges = merged
        return merged == [(0, len(self.buffer))]


class Reassembler:
    def __init__(self, max_elements: int, remember: int = 4096,
                 held_bytes: int = MAX_HELD_BYTES_PER_PEER):
        """``max_elements``: the largest chunk a part may claim; ``held_bytes``: the most
        pending buffers may take per peer (both guard memory)."""
        self.max_elements = max_elements
        self.held_bytes = held_bytes
        self.held: dict = {}            # peer -> bytes of its pending buffers
        self._pending: dict = {}
        self._done = collections.OrderedDict()
        self._remember = remember

    def add(self, ident, start: int, total: int, array, peer=None):
        """Add a part; the whole chunk (a new array) once every element arrived, else None.
        ``ident``: anything naming the chunk and its origin; ``peer``: whom its buffer is
        counted against. Raises :class:`PartError`."""
        if not (0 < total <= self.max_elements) or start < 0 or start + len(array) > total \
                or len(array) == 0:
            raise PartError(f"part [{start}, {start + len(array)}) of a {total}-element chunk "
                            f"(at most {self.max_elements})")
        if ident in self._done:
            log.info("dropped a late part of chunk %s, already complete", ident)
            return None
        pending = self._pending.get(ident)
        if pending is None:
            need = total * array.itemsize + ENTRY_BYTES
            if self.held.get(peer, 0) + need > self.held_bytes:
                raise PartError(f"{self.held.get(peer, 0)} bytes of incomplete chunks are "
                                f"already kept for {peer} (at most {self.held_bytes})")
            pending = self._pending[ident] = _Pending(total, array.dtype, peer, need)
            self.held[peer] = self.held.get(peer, 0) + need
        elif len(pending.buffer) != total or pending.buffer.dtype != array.dtype:
            raise PartError(f"part of chunk {ident} claims {total} x {array.dtype}, earlier "
                            f"parts {len(pending.buffer)} x {pending.buffer.dtype}")
        if not pending.add(start, array):
            return None
        del self._pending[ident]
        self.held[pending.peer] -= pending.cost
        if not self.held[pending.peer]:
            del self.held[pending.peer]
        self._done[ident] = None
        if len(self._done) > self._remember:
            self._done.popitem(last=False)
        return pending.buffer

    def drop(self, select) -> int:
        """Forget the incomplete chunks whose ident ``select`` picks; how many. O(pending)."""
        doomed = [ident for ident in self._pending if select(ident)]
        for ident in doomed:
            pending = self._pending.pop(ident)
            self.held[pending.peer] -= pending.cost
            if not self.held[pending.peer]:
                del self.held[pending.peer]
        return len(doomed)

    @property
    def pending(self) -> int:
        return len(self._pending)
