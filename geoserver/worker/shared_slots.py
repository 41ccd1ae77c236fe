"""A worker's half of the shared memory with its DC server on one host: its segments and
when each slot may be written (the protocol: :mod:`netstorm.geoserver.core.shared_memory`)."""
from __future__ import annotations

import logging
import mmap
import os
import threading

import numpy as np

from ..core.shared_memory import segment_bytes, unmap, views, worth_sharing
from ..core.wire import Kind

__all__ = ["WorkerShares", "WorkerSlots"]

log = logging.getLogger(__name__)


class WorkerSlots:
    """A worker's segment for one key and what it has outstanding through it."""

    def __init__(self, key: int, size: int, dtype):
        """Make the segment (``OSError`` if the system cannot)."""
        self.fd = os.memfd_create(f"netstorm-key-{key}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, segment_bytes(size, dtype))
            self._mapped = mmap.mmap(self.fd, segment_bytes(size, dtype))
        except OSError:
            os.close(self.fd)
            raise
        self.push, self.value = views(self._mapped, size, dtype)
        self.push_round = 0         # the round last written to the push slot, until a
                                    # VALUE of it or a later one came (0: the slot is free)
        self.reply_busy = False     # a request answered into the value slot is outstanding
        self.pushes = self.values = 0   # rounds pushed and values read through the slots

    def claim_push(self, rnd: int) -> bool:
        """Take the push slot for round ``rnd`` if it is free. O(1)."""
        if self.push_round:
            return False
        self.push_round = rnd
        self.pushes += 1
        return True

    def take_push(self, rnd: int, grad: np.ndarray) -> bool:
        """Write round ``rnd``'s ``grad`` into the push slot if it is free. O(size)."""
        if not self.claim_push(rnd):
            return False
        self.push[:] = grad.reshape(-1)
        return True

    def applied(self, rnd: int) -> None:
        """A VALUE of round ``rnd`` came: the server took every push up to it."""
        if self.push_round and rnd >= self.push_round:
            self.push_round = 0

    def close(self) -> None:
        self.push = self.value = None
        unmap(self._mapped)
        self._mapped = None
        os.close(self.fd)


class WorkerShares:
    """A worker's segments, one per key its server mapped, and when each slot may be used
    (thread-safe: the store's operators call from MXNet's threads). O(1) per call besides
    the copies."""

    def __init__(self, enabled: bool):
        """``enabled``: the server is on this host and pushes go uncompressed and unkept."""
        self.enabled = enabled
        self.slots: dict = {}           # key -> WorkerSlots the server mapped
        self._lock = threading.Lock()

    def offer(self, key: int, size: int, dtype):
        """The segment to offer the server in the key's INIT: the one it maps already, a
        new one, or None (the key goes by frames)."""
        if not self.enabled or not worth_sharing(size, dtype):
            return None
        if key in self.slots:
            return self.slots[key]
        try:
            return WorkerSlots(key, size, dtype)
        except OSError as exc:
            log.warning("no shared memory for key %d (%s): keys go by frames", key, exc)
            self.enabled = False
            return None

    def settle(self, key: int, offered, accepted: bool) -> None:
        """The server's answer to ``offered`` (see :meth:`offer`): a segment it declined is
        not used again, even one it had mapped before (a key initialized again)."""
        if offered is None:
            return
        if accepted:
            self.slots[key] = offered
            return
        if self.slots.get(key) is offered:
            del self.slots[key]
        offered.close()     # the server logged why

    def push(self, key: int, rnd: int, grad) -> bool:
        """Write round ``rnd``'s ``grad`` into the key's push slot if it has a free one."""
        slots = self.slots.get(key)
        with self._lock:
            claimed = slots is not None and slots.claim_push(rnd)
        if claimed:     # copied outside the lock (other keys' requests go on meanwhile):
            slots.push[:] = grad.reshape(-1)    # the slot stays this push's until a value
        return claimed                          # of its round, which needs it sent first

    def reserve_reply(self, key: int):
        """The key's slots, reserved for one answer, if none is outstanding; else None."""
        slots = self.slots.get(key)
        with self._lock:
            if slots is None or slots.reply_busy:
                return None
            slots.reply_busy = True
            return slots

    @staticmethod
    def read(reserved, target) -> bool:
        """Copy an answer in shared memory into ``target``; False if none was reserved."""
        if reserved is None:
            return False
        target[:] = reserved.value
        reserved.values += 1
        return True

    def done(self, key: int, reserved, reply) -> None:
        """A request for ``key`` ended with ``reply`` (None: without one, so the server may
        still write its reservation, which then stays taken)."""
        if reply is None:
            return
        slots = self.slots.get(key)
        with self._lock:
            if reserved is not None:
                reserved.reply_busy = False
            if slots is not None and reply.kind == Kind.VALUE:
                slots.applied(reply.seq)

    def close(self) -> None:
        for slots in self.slots.values():
            slots.close()       # a view still in use keeps its mapping until freed
