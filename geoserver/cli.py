"""Helpers shared by the process entry points (``python -m netstorm.scheduler``,
``python -m netstorm.geoserver``)."""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import signal
import sys


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")


class Terminated(Exception):
    """SIGTERM or SIGINT arrived."""


def raise_on_signals() -> None:
    """Turn SIGTERM/SIGINT into :class:`Terminated` so loops unwind and close their sockets."""
    def handler(signum, _frame):
        raise Terminated(signal.Signals(signum).name)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


M_MMAP_THRESHOLD = -3               # glibc mallopt parameter
LARGE_BUFFER_BYTES = 4 << 20        # buffers from this size are mapped and unmapped whole


def return_large_buffers() -> bool:
    """Make glibc map every allocation of :data:`LARGE_BUFFER_BYTES` or more on its own and
    give it back to the system when freed. By default glibc raises that threshold to the
    largest buffer freed so far, so a node that once received a large frame (a worker's push
    of a large tensor, or a stranger's 1 GiB message, which is refused only after ZeroMQ
    read it) keeps that memory for good. Buffers below the threshold (WAN chunks) are
    unaffected. Returns False where this is not glibc (nothing changed)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES))
    except (OSError, AttributeError):
        return False
