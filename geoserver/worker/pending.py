"""One request of a worker waiting for its reply (:class:`Pending`), and how it ends.

A request ends exactly once: answered (its reply came), failed (``error`` says why: a worker
left, the run was aborted, or nothing came within ``timeout_s``). Whoever waits for it is
then woken: a thread blocked in :meth:`Pending.wait`, or the function given to
:meth:`Pending.then` (the kvstore's asynchronous engine operations, which hold no thread
while they wait), which runs in the thread that ended the request.
"""
from __future__ import annotations

import threading
import time

__all__ = ["Pending"]


class Pending:
    __slots__ = ("reply", "what", "needs", "error", "msg", "slots", "deadline", "since",
                 "_then", "_lock", "_ended", "_event")

    def __init__(self, what: str, needs=None):
        self._ended = False
        self._event = None      # made when a thread waits (most requests a function awaits)
        self.reply = None       # the answer (a wire Message), once it came
        self.what = what
        self.needs = needs      # (key, round) it needs every worker's push of; (None, 0):
                                # every worker (a barrier); None: nothing
        self.error = ""         # why it failed without a reply
        self.msg = None         # what went to the server (sent again if it is replaced)
        self.slots = None       # the key's WorkerSlots reserved for the answer
        self.deadline = None    # with a function waiting: when it fails unanswered
        self.since = time.monotonic()   # when it was made (heartbeats say what waits longest)
        self._then = None
        self._lock = threading.Lock()

    def end(self, reply=None, error: str = "") -> None:
        """Answered with ``reply``, or failed for ``error``: wake whoever waits. O(1) plus
        the waiting function."""
        if reply is not None:
            self.reply = reply
        elif error:
            self.error = error
        with self._lock:
            self._ended = True
            if self._event is not None:
                self._event.set()
            then, self._then = self._then, None
        if then is not None:
            then()

    def then(self, function, deadline: float) -> None:
        """Call ``function()`` once this request ends (now, if it already has); if it has
        not by ``deadline`` (``time.monotonic``), whoever checks :meth:`overdue` ends it."""
        with self._lock:
            if not self._ended:
                self._then, self.deadline = function, deadline
                return
        function()

    def overdue(self, now: float) -> bool:
        """A function waits for it and its deadline has passed."""
        return self._then is not None and self.deadline is not None and now > self.deadline

    @property
    def event(self) -> threading.Event:
        """Set once it ended (made on first use)."""
        with self._lock:
            if self._event is None:
                self._event = threading.Event()
                if self._ended:
                    self._event.set()
            return self._event

    def wait(self, timeout_s: float) -> bool:
        """Block until it ends; False if ``timeout_s`` passed first."""
        return self.event.wait(timeout_s)
