"""Helpers shared by the process entry points (``python -m netstorm.scheduler``,
``python -m netstorm.geoserver``): logging, signals, the start of a node. What a process
tells the launcher when it stops is :mod:`netstorm.geoserver.config.exit_reasons`."""
from __future__ import annotations

import logging
import signal
import sys

from .config.cluster import ClusterFileError
from .config.keys import SecurityError
from .config.exit_reasons import write_reason
from .core.van import TransportError

__all__ = ["StopSignals", "Terminated", "raise_on_signals", "setup_logging", "start_node"]


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")


def start_node(build, log: logging.Logger, reason_file: str = ""):
    """``build()`` reads the cluster file and binds the node's Van: its result, or None
    after logging why it failed, also in ``reason_file`` (the entry point then exits 2).
    Signals are turned into :class:`Terminated` from then on: ``(result, StopSignals)``."""
    try:
        built = build()
    except (ClusterFileError, SecurityError, TransportError) as exc:
        log.error("%s", exc)
        write_reason(reason_file, str(exc))
        return None, None
    return built, raise_on_signals()


class Terminated(Exception):
    """SIGTERM or SIGINT arrived."""


class StopSignals:
    """SIGTERM/SIGINT become :class:`Terminated` in the main thread, so loops unwind and
    close their sockets. Python ignores an exception raised inside a destructor (a ZeroMQ
    socket's, say), which would swallow the signal: the signal is also remembered, and
    :meth:`check`, called by the loops once a beat, raises it again."""

    def __init__(self):
        self.received: str | None = None
        self.stopping = False

    def _handler(self, signum, _frame):
        self.received = signal.Signals(signum).name
        if not self.stopping:
            raise Terminated(self.received)

    def quiet(self) -> None:
        """The process is closing its sockets and exiting anyway: a signal from now on is
        only remembered, so clean-up is not cut short by a traceback."""
        self.stopping = True

    def check(self) -> None:
        if self.received is not None:
            raise Terminated(self.received)


def raise_on_signals() -> StopSignals:
    """Install :class:`StopSignals` for SIGTERM and SIGINT; the loops' ``check``."""
    stop = StopSignals()
    signal.signal(signal.SIGTERM, stop._handler)
    signal.signal(signal.SIGINT, stop._handler)
    return stop
