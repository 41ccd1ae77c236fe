"""A DC server's half of the shared memory with its workers on one host: the segments it
maps, after checking what a worker offers (the protocol:
:mod:`netstorm.geoserver.core.shared_memory`)."""
from __future__ import annotations

import logging
import mmap
import os
import stat

from ..core.shared_memory import (MAX_FD, MAX_SHARED_KEYS, MIN_SHARED_BYTES, segment_bytes, unmap,
                                 views, worth_sharing)

__all__ = ["SharedSegments"]

log = logging.getLogger(__name__)


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
        self._slots[(worker, key)] = (mapped, *views(mapped, size, dtype))
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
            unmap(mapped)

    def close(self) -> None:
        for worker, key in list(self._slots):
            self.detach(worker, key)
