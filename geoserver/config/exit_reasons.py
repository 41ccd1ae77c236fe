"""How a process tells the launcher why it stopped: its exit code, a reason file in the
launcher's run folder, and the launcher's own stop note (why it stops the others). Shared by
the servers, the scheduler, the worker library and the launcher; files only, no sockets."""
from __future__ import annotations

import json
from pathlib import Path

__all__ = ["EXIT_ABORTED", "EXIT_FAILED", "EXIT_LEFT", "MAX_REASON_CHARS", "STOP_NOTE", "describe",
           "read_reason", "read_stop_note", "write_reason"]

# A server or the scheduler that stops because *another* node failed (the scheduler's ABORT,
# or the scheduler aborting on a node's failure) exits with this code, so the launcher can
# name the node that failed first rather than a bystander that stopped faster.
EXIT_ABORTED = 4
EXIT_FAILED = 1     # any other failure, its reason in the reason file
# A server whose DC left the run (elastic: it was stopped or cut off, and the others went on
# without it) exits with this code: its launcher may start the DC again to rejoin.
EXIT_LEFT = 5


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




def describe(exc: BaseException) -> str:
    """``Type: message`` for an error outside netstorm's own (what the catch-all of an
    entry point leaves as its reason): the exception's class name and its text, or only
    the name if it has no text (``ZeroDivisionError: division by zero``)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
