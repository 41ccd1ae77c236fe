"""How a tensor is cut into chunks: the unit that is summed, forwarded and pipelined, and
how a chunk of one round under one policy is named (:class:`ChunkId`)."""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["ChunkId", "ENTRY_BYTES", "chunk_ranges"]

ENTRY_BYTES = 256       # what one kept chunk costs besides its data (counted towards the bound)


class ChunkId(NamedTuple):
    """One chunk of one round, as the policy in force (``version``) routes it on ``tree``."""
    key: int
    chunk: int
    rnd: int
    version: int
    tree: int


def chunk_ranges(size: int, itemsize: int, chunk_bytes: int) -> list:
    """Element ranges ``[(start, stop), ...]`` covering ``size`` elements, each at most
    ``chunk_bytes`` bytes (at least one element). A tensor of zero elements has one empty
    chunk so every key travels as at least one message. O(size / chunk)."""
    if size < 0 or itemsize <= 0 or chunk_bytes <= 0:
        raise ValueError(f"bad chunking request size={size} itemsize={itemsize} "
                         f"chunk_bytes={chunk_bytes}")
    per_chunk = max(1, chunk_bytes // itemsize)
    if size == 0:
        return [(0, 0)]
    return [(start, min(size, start + per_chunk)) for start in range(0, size, per_chunk)]
