"""A worker's SIGTERM under the launcher, also while its main thread waits inside MXNet.

Python runs a signal handler only on the main thread, between bytecodes. A main thread that
waits inside MXNet's C++ engine (``mx.nd.waitall``, ``asnumpy()``, a pushpull whose value
never comes because another DC stopped) never gets there: the worker sat out the launcher's
grace, died by its SIGKILL, and the scheduler never heard why it stopped (issue 34).

So the signal is also taken off the main thread. Python's C-level handler writes the number
of every signal it handles to the wakeup fd (``signal.set_wakeup_fd``), from whichever thread
the kernel interrupted; a thread of its own blocks reading it (no polling). After a SIGTERM
it gives the main thread :data:`GRACE_S` to take the signal in Python (then the script ends
through ``SystemExit``: its ``finally`` clauses and atexit run, as before); a main thread
that has not by then is stuck in native code, and this thread ends the worker itself: it
reports the stop (the note reaches the scheduler), flushes the logs and ``os._exit``\\ s with
the code ``SystemExit`` would have given. Exactly one of the two stops the worker.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading

__all__ = ["GRACE_S", "stop_on_sigterm"]

GRACE_S = 0.5   # how long the main thread has to take a SIGTERM before another thread does


def stop_on_sigterm(stopped, report) -> None:
    """Make SIGTERM end this process (call in the main thread): ``stopped()`` records
    why and returns it, then the main thread raises ``SystemExit(128 + signum)``; if the main
    thread is stuck in native code, another thread calls ``report(reason)`` (which must work
    from any thread) and exits. Where the wakeup fd is someone else's (asyncio's, say), it is
    left alone and only the main thread takes the signal."""
    claim = _Claim()

    def on_sigterm(signum, _frame):
        if claim.main_took.is_set():    # a second SIGTERM (Slurm's scancel signals every
            return                      # process of a step): the first is ending the script
        if not claim.take("main"):      # the other thread is ending the process
            threading.Event().wait()
        stopped()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd)
    if previous != -1:
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return

    def watch():
        while signal.SIGTERM not in os.read(read_fd, 64):
            pass                        # another signal Python handles (SIGINT, ...)
        if claim.main_took.wait(GRACE_S) or \
                signal.getsignal(signal.SIGTERM) is not on_sigterm or not claim.take("thread"):
            return                      # the main thread took it, or the script's own handler
        try:
            report(stopped())
        except Exception as exc:       # noqa: BLE001 - the process ends all the same
            print(f"netstorm: could not report the SIGTERM: {exc!r}", file=sys.stderr)
        finally:
            logging.shutdown()
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="netstorm-sigterm", daemon=True).start()


class _Claim:
    """Who stops the process: the first of the main thread and the watching thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by = ""
        self.main_took = threading.Event()

    def take(self, who: str) -> bool:
        with self._lock:
            self._by = self._by or who
            if who == "main":
                self.main_took.set()
            return self._by == who
