"""An entry point's last resort: an exception no part of netstorm expected becomes one line,
``PROG: error: Type: message``, and exit status 2, never a traceback on the user's terminal.
The traceback goes to a file of the temporary folder (the line says which), or to stderr
when the user asked (``--debug``, or ``NETSTORM_DEBUG=1`` in the entry point's environment,
which the entry point passes in: nothing here reads the environment). Files only."""
from __future__ import annotations

import os
import sys
import tempfile
import traceback

__all__ = ["DEBUG_FLAG", "DEBUG_VARIABLE", "EXIT_UNEXPECTED", "MAX_MESSAGE_CHARS",
           "debug_wanted", "report_uncaught"]

DEBUG_FLAG = "--debug"
DEBUG_VARIABLE = "NETSTORM_DEBUG"
EXIT_UNEXPECTED = 2
MAX_MESSAGE_CHARS = 500


def debug_wanted(argv, environ) -> bool:
    """Whether the user asked for tracebacks: ``--debug`` among the options (before a
    ``--``, after which the worker command starts), or ``NETSTORM_DEBUG`` set in
    ``environ`` to anything but "" or "0"."""
    argv = list(argv)
    options = argv[:argv.index("--")] if "--" in argv else argv
    return DEBUG_FLAG in options or environ.get(DEBUG_VARIABLE, "") not in ("", "0")


def _one_line(exc: BaseException) -> str:
    """``Type: message`` of ``exc``, on one line of at most :data:`MAX_MESSAGE_CHARS`."""
    message = " ".join(str(exc).split())
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def report_uncaught(prog: str, exc: BaseException, debug: bool, err=None) -> int:
    """Say ``exc`` as one line on ``err`` (stderr), its traceback printed before it when
    ``debug``, else kept in a new file the line names; :data:`EXIT_UNEXPECTED`."""
    err = sys.stderr if err is None else err
    text = "".join(traceback.format_exception(exc))
    if debug:
        print(text, end="", file=err)
        where = "traceback above"
    else:
        try:
            fd, path = tempfile.mkstemp(prefix=f"{prog}-", suffix=".traceback")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            where = f"traceback in {path}"
        except OSError:
            where = f"traceback not kept: rerun with {DEBUG_FLAG}"
    print(f"{prog}: error: {_one_line(exc)} (unexpected; {where})", file=err)
    err.flush()
    return EXIT_UNEXPECTED
