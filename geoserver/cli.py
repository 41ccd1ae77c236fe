"""Helpers shared by the process entry points (``python -m netstorm.scheduler``,
``python -m netstorm.geoserver``): logging, signals, the start of a node. What a process
tells the launcher when it stops is :mod:`netstorm.geoserver.config.exit_reasons`."""
from __future__ import annotations

import logging
import signal
import sys

from .config.cluster import ClusterFileError
from .config.keys import SecurityError
from .config.exit_reasons import EXIT_FAILED, describe, write_reason
from .core.van import TransportError

__all__ = ["LOG_DATE_FORMAT", "LOG_FORMAT", "LOG_LEVELS", "StopSignals", "Terminated",
           "add_log_level_flags", "raise_on_signals", "run_entry_point", "setup_logging",
           "start_node"]

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
              "error": logging.ERROR}     # the names --log-level takes, in every process
LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"
LOG_DATE_FORMAT = "%H:%M:%S"


def add_log_level_flags(parser) -> None:
    """``--log-level LEVEL`` (a name of :data:`LOG_LEVELS`, default ``info``; the launcher
    passes its own) and ``--verbose``, the same as ``--log-level debug``."""
    parser.add_argument("--log-level", choices=list(LOG_LEVELS), default="info",
                        help="the lowest level logged (default: info)")
    parser.add_argument("--verbose", dest="log_level", action="store_const", const="debug",
                        help="the same as --log-level debug")


def setup_logging(level: str = "info") -> None:
    """This process's log lines on standard error from ``level`` (a name of
    :data:`LOG_LEVELS`) up, as ``12:00:01.234 INFO netstorm.server: ...``."""
    logging.basicConfig(level=LOG_LEVELS[level], stream=sys.stderr, format=LOG_FORMAT,
                        datefmt=LOG_DATE_FORMAT)


def run_entry_point(run, args, log: logging.Logger, who: str) -> int:
    """``run(args)`` with logging set up from ``args.log_level``; an error netstorm does not
    name itself (a bug, or a value no check caught) ends it with code 1, its ``Type:
    message`` left in ``args.reason_file`` for the launcher's line and logged as ``who``
    stopping (with its traceback, but for an ``OSError``, which is about this machine)."""
    setup_logging(args.log_level)
    try:
        return run(args)
    except Exception as exc:      # noqa: BLE001 - the catch-all: say why, in one line
        reason = describe(exc)
        log.error("%s stops on an unexpected error: %s", who, reason,
                  exc_info=not isinstance(exc, OSError))
        write_reason(args.reason_file, reason)
        return EXIT_FAILED


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


class Terminated(KeyboardInterrupt):
    """A stop signal arrived; its text is the signal's name. A :class:`KeyboardInterrupt`,
    so that what handles Ctrl-C handles SIGTERM alike and no ``except Exception`` swallows
    it; ``exit_code`` is the shell's for that signal (128 + its number)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.exit_code = 128 + signal.Signals[name].value


class StopSignals:
    """The one way netstorm's processes turn stop signals (default SIGTERM and SIGINT) into
    :class:`Terminated` in the main thread, so that loops unwind and ``with`` blocks clean
    up. As a context manager it restores the previous handlers on exit (the launcher, the
    emulated WAN, the benchmark); :func:`raise_on_signals` installs it for a process's life
    (the servers and the scheduler). Python ignores an exception raised inside a destructor
    (a ZeroMQ socket's, say), which would swallow the signal: the signal is also remembered,
    and :meth:`check`, called by the loops once a beat, raises it again."""

    def __init__(self, *signals):
        self.signals = signals or (signal.SIGTERM, signal.SIGINT)
        self.received: str | None = None
        self.stopping = False
        self._previous: dict = {}

    def _handler(self, signum, _frame):
        self.received = signal.Signals(signum).name
        if not self.stopping:
            raise Terminated(self.received)

    def install(self) -> "StopSignals":
        self._previous = {s: signal.signal(s, self._handler) for s in self.signals}
        return self

    def restore(self) -> None:
        """Put back the handlers :meth:`install` replaced."""
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def __enter__(self) -> "StopSignals":
        return self.install()

    def __exit__(self, *_exc) -> bool:
        self.restore()
        return False

    def quiet(self) -> None:
        """The process is closing its sockets and exiting anyway: a signal from now on is
        only remembered, so clean-up is not cut short by a traceback."""
        self.stopping = True

    def check(self) -> None:
        if self.received is not None:
            raise Terminated(self.received)


def raise_on_signals() -> StopSignals:
    """Install :class:`StopSignals` for SIGTERM and SIGINT for the rest of the process; the
    loops' ``check``."""
    return StopSignals().install()
