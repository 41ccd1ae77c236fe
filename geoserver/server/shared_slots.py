"""Shared memory between a worker and its DC server on the same host: no socket for a key's bytes.

A worker that reaches its DC's server over the ``ipc://`` endpoint (they share a host) gives
each key of at least :data:`MIN_SHARED_BYTES` a segment of two slots, ``[push | value]``,
each the key's bytes rounded up to a page. The segment is an anonymous ``memfd``: nothing is
left in any folder if a process dies. The protocol (flags of :class:`~netstorm.geoserver.wire.Flag`):

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

import logging
import mmap
import os
import stat
import threading

import numpy as np

from ..core.wire import Kind

log = logging.getLogger(__name__)

MIN_SHARED_BYTES = 64 << 10     # smaller keys go by frames (a copy costs less than a slot)
MAX_SHARED_KEYS = 1024          # per worker: more keys go by frames (maps and descriptors)
MAX_FD = 1 << 20                # a descriptor number a worker may name


def slot_bytes(nbytes: int) -> int:
    """One slot's size: ``nbytes`` rounded up to a page (at least one page). O(1)."""
    return max(1, -(-nbytes // mmap.PAGESIZE)) * mmap.PAGESIZE


def segment_bytes(size: int, dtype) -> int:
    """The segment a key of ``size`` elements of ``dtype`` needs: two slots. O(1)."""
    return 2 * slot_bytes(size * np.dtype(dtype).itemsize)


def _views(mapped: mmap.mmap, size: int, dtype) -> tuple:
    """The push and value slots of a mapped segment, as flat arrays of ``dtype``."""
    dtype = np.dtype(dtype)
    offset = slot_bytes(size * dtype.itemsize)
    return (np.frombuffer(mapped, dtype, size, 0), np.frombuffer(mapped, dtype, size, offset))


def _unmap(mapped: mmap.mmap | None) -> None:
    if mapped is not None:
        try:
            mapped.close()
        except BufferError:     # a view is still referenced: the mapping ends with it
            pass


def worth_sharing(size: int, dtype) -> bool:
    return size * np.dtype(dtype).itemsize >= MIN_SHARED_BYTES


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
        self.push, self.value = _views(self._mapped, size, dtype)
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
        _unmap(self._mapped)
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


class SharedSegments:
    """A DC server's view of its local workers' segments: ``(worker, key)`` -> slots."""

    def __init__(self):
        self._slots: dict = {}      # (worker, key) -> (mmap, push view, value view)

    def attach(self, worker: int, key: int, pid: int, fd, size: int, dtype) -> str:
        """Map worker ``worker``'s segment for ``key`` (descriptor ``fd`` of process ``pid``,
        known from the kernel); "" once mapped, else why not (nothing is mapped then)."""
        if not pid:
            return "the worker is not connected over this host's ipc:// endpoint"
        if not isinstance(fd, int) or not 0 <= fd < MAX_FD:
            return f"shm_fd {fd!r} is not a descriptor number"
        if not worth_sharing(size, dtype):
            return f"key {key} is smaller than {MIN_SHARED_BYTES} bytes"
        if (worker, key) not in self._slots and \
                sum(w == worker for w, _ in self._slots) >= MAX_SHARED_KEYS:
            return f"the worker already shares {MAX_SHARED_KEYS} keys"
        need = segment_bytes(size, dtype)
        path = f"/proc/{int(pid)}/fd/{fd}"
        try:
            if not os.readlink(path).startswith("/memfd:"):
                return f"descriptor {fd} of process {pid} is not a memfd segment"
            handle = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            return f"cannot open descriptor {fd} of process {pid}: {exc.strerror}"
        try:
            info = os.fstat(handle)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or \
                    info.st_size != need:
                return (f"descriptor {fd} of process {pid} is not a segment of this user "
                        f"of {need} bytes")
            mapped = mmap.mmap(handle, need)
        except OSError as exc:
            return f"cannot map descriptor {fd} of process {pid}: {exc.strerror}"
        finally:
            os.close(handle)
        self.detach(worker, key)
        self._slots[(worker, key)] = (mapped, *_views(mapped, size, dtype))
        return ""

    def has(self, worker: int, key: int) -> bool:
        return (worker, key) in self._slots

    def push(self, worker: int, key: int):
        """The push slot of ``worker``'s segment for ``key`` (None if not shared). O(1)."""
        slots = self._slots.get((worker, key))
        return None if slots is None else slots[1]

    def value(self, worker: int, key: int):
        """The value slot of ``worker``'s segment for ``key`` (None if not shared). O(1)."""
        slots = self._slots.get((worker, key))
        return None if slots is None else slots[2]

    def detach(self, worker: int, key: int) -> None:
        slots = self._slots.pop((worker, key), None)
        if slots is not None:
            mapped = slots[0]
            del slots           # its views, so that the mapping can close now
            _unmap(mapped)

    def close(self) -> None:
        for worker, key in list(self._slots):
            self.detach(worker, key)
