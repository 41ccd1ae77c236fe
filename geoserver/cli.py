"""Helpers shared by the process entry points (``python -m netstorm.scheduler``,
``python -m netstorm.geoserver``) and a worker's failure report: logging, signals, exit codes,
reason files for the launcher."""
from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path

from .config.cluster import ClusterFileError
from .core.security import SecurityError
from .core.van import TransportError


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")


# A server or the scheduler that stops because *another* node failed (the scheduler's ABORT,
# or the scheduler aborting on a node's failure) exits with this code, so the launcher can
# name the node that failed first rather than a bystander that stopped faster.
EXIT_ABORTED = 4


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


MAX_REASON_CHARS = 2000
STOP_NOTE = "stopping"      # in the launcher's run folder: why it stops the processes


def read_stop_note(run_dir: str) -> str:
    """Why the launcher that owns ``run_dir`` is stopping this process ("" if unknown)."""
    return read_reason(str(Path(run_dir) / STOP_NOTE))[0] if run_dir else ""


def write_reason(path: str, reason: str, caused_by_other: bool = False) -> None:
    """Leave why this process stops in ``path`` (the launcher's, for its failure line), and
    whether it stops because *another* node failed (then the launcher looks for that one
    first); nothing if no path was given. Best effort: the process is stopping anyway."""
    if not path:
        return
    try:
        Path(path).write_text(json.dumps({"reason": reason[:MAX_REASON_CHARS],
                                          "caused_by_other": caused_by_other}),
                              encoding="utf-8")
    except OSError:
        pass


def read_reason(path: str) -> tuple:
    """``(reason, caused_by_other)`` from a file :func:`write_reason` wrote; ``("", False)``
    if there is none or it is unreadable. Only this machine's own processes write it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return str(data["reason"])[:MAX_REASON_CHARS], bool(data["caused_by_other"])
    except (OSError, ValueError, KeyError, TypeError):
        return "", False


