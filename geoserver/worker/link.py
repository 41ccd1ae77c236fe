"""A worker's link to its DC's server, for the worker client
(:class:`~netstorm.geoserver.worker.client.WorkerClient`): which process the server is,
and the send side of the client's I/O thread.

A PULL, or a PUSH of a key smaller than ``fuse_bytes``, waits in the outbox
(:mod:`netstorm.geoserver.worker.outbox`) up to ``fuse_linger_s`` for others, to go as one
BATCH; anything else goes now, after what waits there. Should a send fail, the requests it
held fail with the reason: they leave the pending requests at once and are ended by the I/O
thread (:attr:`ServerLink.unsent`), outside the lock, which may be the sender and goes on.
When the server is replaced, the link reaches the new process (:meth:`ServerLink.moved_to`).
"""
from __future__ import annotations

import logging
import time

from ..core.nodes import NodeInfo
from ..core.wire import Kind, Message
from .outbox import Outbox

__all__ = ["ServerLink"]

log = logging.getLogger("netstorm.worker")


class ServerLink:
    """This worker's link to ``server``: ``po`` sends, ``van.wake()`` wakes the I/O thread,
    ``requests`` (:class:`~netstorm.geoserver.worker.requests.Requests`) holds the requests
    a failed send fails, and its lock is held around :meth:`post` and :meth:`send_now`."""

    def __init__(self, po, van, server: NodeInfo, requests, fuse_bytes: int,
                 fuse_linger_s: float):
        self.po, self.van, self.server, self.requests = po, van, server, requests
        self.fuse_bytes = fuse_bytes
        self.outbox = Outbox(fuse_linger_s)
        self.unsent: list = []          # (request, why) that could not be sent

    def post(self, msg: Message, keys: dict) -> None:
        """Send ``msg`` to the server, now or with what waits in the outbox (lock held);
        ``keys``: the declared keys, by key (their sizes)."""
        if self.fuse_bytes and (msg.kind == Kind.PULL or msg.kind == Kind.PUSH and
                                keys[msg.key].nbytes < self.fuse_bytes):
            action = self.outbox.add(msg, time.monotonic())
            if action == Outbox.WAKE:
                self.van.wake()             # the I/O thread sends it by outbox.due()
            elif action == Outbox.SEND:
                self.send_now()
            return
        self.send_now()
        self.po.send(self.server.id, msg)

    def send_now(self) -> None:
        """Send what waits in the outbox (lock held). Should that fail, the requests it
        held fail with the reason (the I/O thread, which may be the sender, goes on)."""
        held = list(self.outbox.messages)
        waiting = self.outbox.take()
        if waiting is None:
            return
        try:
            self.po.send(self.server.id, waiting)
        except Exception as exc:        # noqa: BLE001 - each request carries it
            rank = self.requests.rank
            log.error("worker rank %d: could not send %d requests to %s: %r", rank,
                      len(held), self.server.describe(), exc)
            pending_of = self.requests.pending
            for msg in held:            # ended by the I/O thread, without the lock
                pending = pending_of.pop(msg.request, None) if msg.request else None
                if pending is not None:
                    self.unsent.append((pending, f"worker rank {rank}: could not "
                                                 f"send {pending.what}: {exc!r}"))
            self.van.wake()

    def send_due(self, now: float):
        """Send what waits in the outbox if it is due (I/O thread); when the rest is."""
        with self.requests.lock:
            due = self.outbox.due()
            if due is not None and due <= now:
                self.send_now()
                return None
            return due

    def end_unsent(self) -> None:
        """End the requests a failed send left (I/O thread, without the lock)."""
        while self.unsent:
            pending, error = self.unsent.pop()
            pending.end(error=error)

    def moved_to(self, node: NodeInfo) -> None:
        """The server now runs as ``node`` (lock held): reach it there; what waited in the
        outbox is dropped, as if lost with the old process (it is sent again)."""
        self.server = self.po.table.nodes[node.id] = self.server.moved_to(node)
        self.po.van.disconnect(node.id, linger_s=0)
        self.outbox.clear()
