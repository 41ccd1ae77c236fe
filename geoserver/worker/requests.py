"""A worker's requests waiting for their replies, by token, for the worker client
(:class:`~netstorm.geoserver.worker.client.WorkerClient`), and every way they fail.

A request is registered under its token (its request id; a barrier's ``("barrier", seq)``)
and ends once: answered (the client's dispatch pops it), or failed here: the run was aborted
(:meth:`Requests.fail_all`), a worker that left can never push what it needs
(:meth:`Requests.worker_left`), or nothing came within ``timeout_s`` (:meth:`Requests.wait`
for a waiting thread, :meth:`Requests.expire` for a waiting function). No sockets: the
client sends; ``lock`` is the client's, which it holds around registering and sending.
"""
from __future__ import annotations

import itertools
import threading
import time

from ..core.wire import Kind, Message
from .pending import Pending
from .progress import lacking, missing_from
from .settings import KVStoreError

__all__ = ["Requests", "needs"]



def needs(msg: Message):
    """What ``msg`` needs every worker for: pushes and pulls their key's round, barriers
    every worker (see :class:`~netstorm.geoserver.worker.pending.Pending`). O(1)."""
    if msg.kind in (Kind.PUSH, Kind.PULL):
        return (msg.key, msg.seq) if msg.seq else None
    return (None, 0) if msg.kind == Kind.BARRIER else None

class Requests:
    """The pending requests of one worker (rank ``rank``); ``esync``: a worker that left
    dooms only barriers (its DC's server goes on without it, docs/sync.md)."""

    def __init__(self, rank: int, timeout_s: float, esync: bool, lock=None):
        self.rank, self.timeout_s, self.esync = rank, timeout_s, esync
        self.lock = lock or threading.Lock()
        self.pending: dict = {}         # token -> Pending
        self.ids = itertools.count(1)   # request ids
        self.aborted: str | None = None
        self.departed: list = []        # (who, {key: rounds pushed}) of workers that finished
        self.caused_by_other = False    # a request failed because another node failed or
                                        # left: the launcher looks for that one first
        self.changed = threading.Condition(self.lock)   # notified when the run is aborted
                                                        # (and when esync step counts come)
        self.missing: dict = {}     # (key, round) -> who has not pushed it, by the scheduler

    def add(self, pending: Pending, msg: Message, token=None) -> None:
        """Register ``pending`` under ``token`` (None: a new request id, given to ``msg``),
        unless the run was aborted or a worker that left dooms it: then raise at once
        (lock held)."""
        if self.aborted:
            raise KVStoreError(f"worker rank {self.rank}: {self.aborted}")
        self.refuse_if_left(pending.needs, pending.what)
        if token is None:
            token = msg.request = next(self.ids)
        self.pending[token] = pending

    def withdraw(self, token) -> None:
        """Forget the request ``token``: an answer that comes later is unexpected (dropped
        by the caller). O(1)."""
        with self.lock:
            self.pending.pop(token, None)

    def fail_all(self, reason: str, caused_by_other: bool = True) -> None:
        """Fail every request, and every later one, for ``reason``. O(requests)."""
        with self.lock:
            self.caused_by_other = caused_by_other
            self.aborted = reason
            pending, self.pending = list(self.pending.values()), {}
            self.changed.notify_all()
        for p in pending:
            p.end()

    def worker_left(self, who: str, pushes: dict) -> None:
        """Another worker finished, having pushed each key ``pushes[key]`` times: a later
        round of a key (and every barrier) needs it, so what waits for one fails now,
        naming it, instead of on timeout. O(requests x workers that left)."""
        with self.lock:
            self.departed.append((who, pushes))
            doomed = []
            for token, pending in list(self.pending.items()):
                pending.error = self.left_error(pending.needs, pending.what)
                if pending.error:
                    del self.pending[token]
                    doomed.append(pending)
            self.caused_by_other |= bool(doomed)
        for pending in doomed:
            pending.end()

    def left_error(self, needs, what: str) -> str:
        """Why a request for ``what`` needing ``needs`` can never be answered: the first
        worker that left before pushing what it needs ("" if none did; lock held)."""
        if needs is None:
            return ""
        key, rnd = needs
        if key is not None and self.esync:
            return ""       # its DC's server goes on without it (docs/sync.md)
        for who, pushes in self.departed:
            done = pushes.get(key, 0)
            if key is None or rnd > done:
                after = "" if key is None else f" after round {done} of key {key}"
                return (f"worker rank {self.rank}: {who} finished{after}, so {what} can "
                        f"never come (every round and barrier needs every worker)")
        return ""

    def refuse_if_left(self, needs, what: str) -> None:
        """Raise at once for a request that can never be answered (lock held)."""
        error = self.left_error(needs, what)
        if error:
            self.caused_by_other = True
            raise KVStoreError(error)

    def unanswered(self, pending: Pending) -> str:
        """Why ``pending`` failed after ``timeout_s``, naming what its round lacks when the
        scheduler said (:func:`~netstorm.geoserver.worker.progress.lacking`)."""
        why = lacking(self.missing, pending.needs)
        return (f"worker rank {self.rank}: waited {self.timeout_s:g}s for "
                f"{pending.what}; no answer (timeout_s in the cluster file)"
                f"{'; ' + why if why else ''}")

    def note_missing(self, rows) -> None:
        """The scheduler's latest word on the rounds this worker waits for (a heartbeat's
        ``missing``; none: it knows of no wait)."""
        self.missing = missing_from(rows)

    def waiting(self) -> tuple:
        """``(whether a request waits, [(since, needs), ...] of those that need other
        workers, oldest first)`` for the heartbeat. O(requests log requests)."""
        with self.lock:
            pending = list(self.pending.values())
        needing = sorted(((p.since, p.needs) for p in pending if p.needs is not None),
                         key=lambda item: item[0])
        return bool(pending), needing

    def expire(self, now: float) -> None:
        """Fail the requests a function waits for (:meth:`when_answered`) that are overdue,
        as :meth:`wait` fails a thread's (I/O thread, once a beat; O(requests))."""
        with self.lock:
            overdue = [(token, p) for token, p in self.pending.items() if p.overdue(now)]
            for token, _ in overdue:
                del self.pending[token]
        for _, pending in overdue:
            pending.end(error=self.unanswered(pending))

    def when_answered(self, handle: Pending, function) -> None:
        """Call ``function()`` once ``handle`` is answered or has failed, in the thread that
        learns it (at once, if it already is); unanswered after ``timeout_s``, it fails as
        a waiting thread's would. Holds no thread meanwhile."""
        handle.then(function, time.monotonic() + self.timeout_s)

    def wait(self, pending: Pending, expect: Kind, server: str) -> Message:
        """Block until ``pending`` is answered with ``expect`` (from ``server``, as it is
        described) and return the reply; raise :class:`KVStoreError` saying why not."""
        if not pending.wait(self.timeout_s):
            raise KVStoreError(self.unanswered(pending))
        reply = pending.reply
        if reply is None:
            raise KVStoreError(pending.error or f"worker rank {self.rank}: "
                               f"{self.aborted} (while waiting for {pending.what})")
        if reply.kind == Kind.ERROR:
            raise KVStoreError(f"{server} rejected {pending.what}: "
                               f"{reply.meta.get('reason', '?')}")
        if reply.kind != expect:
            raise KVStoreError(f"worker rank {self.rank}: got {reply.kind.name} for "
                               f"{pending.what}, expected {expect.name}")
        return reply
