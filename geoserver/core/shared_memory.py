"""Shared memory between a worker and its DC server on the same host: no socket for a key's bytes.

This module is the layout both sides agree on; the worker's half is
:mod:`netstorm.geoserver.worker.shared_slots`, the server's
:mod:`netstorm.geoserver.server.shared_segments`.

A worker that reaches its DC's server over the ``ipc://`` endpoint (they share a host) gives each
key of at least :data:`MIN_SHARED_BYTES` a segment of two slots, ``[push | value]``, each the key's
bytes rounded up to a page. The segment is an anonymous ``memfd``: nothing is left in any folder if
a process dies. The protocol (flags of :class:`~netstorm.geoserver.core.wire.Flag`):

- INIT carries ``meta.shm_fd``, the segment's descriptor in the worker. The server opens
  ``/proc/<pid>/fd/<fd>``, where ``pid`` is the connecting process's, from the kernel's
  credentials of the ``ipc://`` connection (never from the message), checks that it is a
  ``memfd`` of this Unix user of exactly the size the key needs, and maps it.
  INIT_DONE's ``meta.shared`` says whether it did; if not, the key goes by frames.
- PUSH with ``SHARED`` has no frame: its values are in the push slot. The worker writes that
  slot only when no earlier push through it is still unapplied (a VALUE of that round or a
  later one came back), and the server copies the values out when it takes the push, so
  neither side reads a slot while the other writes it.
- PULL, or PUSH with WANT_VALUE, with ``REPLY_SHARED`` asks for the answer in the value slot;
  a worker has at most one such request per key outstanding, so the server never writes
  a value the worker is reading. VALUE with ``SHARED`` has no frame: the value is in the slot.

Anything else goes by frames as before: a smaller key, a server on another host, a
cluster that keeps pushes to replace a lost server, compressed pushes, row_sparse keys, a
server that declined. One ``memcpy`` of the key per push (worker) and per value (server),
instead of two socket copies each way and fresh receive pages; O(1) work besides it.
"""
from __future__ import annotations

__all__ = ["MAX_FD", "MAX_SHARED_KEYS", "MIN_SHARED_BYTES", "segment_bytes", "slot_bytes", "unmap",
           "views", "worth_sharing"]

import mmap

import numpy as np


MIN_SHARED_BYTES = 64 << 10     # smaller keys go by frames (a copy costs less than a slot)
MAX_SHARED_KEYS = 1024          # per worker: more keys go by frames (maps and descriptors)
MAX_FD = 1 << 20                # a descriptor number a worker may name


def slot_bytes(nbytes: int) -> int:
    """One slot's size: ``nbytes`` rounded up to a page (at least one page). O(1)."""
    return max(1, -(-nbytes // mmap.PAGESIZE)) * mmap.PAGESIZE


def segment_bytes(size: int, dtype) -> int:
    """The segment a key of ``size`` elements of ``dtype`` needs: two slots. O(1)."""
    return 2 * slot_bytes(size * np.dtype(dtype).itemsize)


def views(mapped: mmap.mmap, size: int, dtype) -> tuple:
    """The push and value slots of a mapped segment, as flat arrays of ``dtype``."""
    dtype = np.dtype(dtype)
    offset = slot_bytes(size * dtype.itemsize)
    return (np.frombuffer(mapped, dtype, size, 0), np.frombuffer(mapped, dtype, size, offset))


def unmap(mapped: mmap.mmap | None) -> None:
    if mapped is not None:
        try:
            mapped.close()
        except BufferError:     # a view is still referenced: the mapping ends with it
            pass


def worth_sharing(size: int, dtype) -> bool:
    return size * np.dtype(dtype).itemsize >= MIN_SHARED_BYTES
