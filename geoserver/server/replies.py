"""A DC server's replies to its local workers, small VALUEs fused: the replies one message
(or one drain of the socket) makes go to each worker together, several in one BATCH
(:mod:`netstorm.geoserver.core.batch`), in the order they were made. Under esync a VALUE
carries the worker's local steps until the next round (:mod:`.esync`). O(1) per reply,
O(replies) per flush.
"""
from __future__ import annotations

import time

from ..core import wire
from ..core.batch import MAX_MESSAGES, pack
from ..core.wire import Kind, Message

__all__ = ["Replies"]


class Replies:
    """The replies that wait to be sent to the local workers."""

    def __init__(self, po, fuse_bytes: int, balancer, stats: dict):
        """``fuse_bytes``: a VALUE smaller than this waits for the others (0: none waits);
        ``balancer``: esync's, or None; ``stats["fused"]`` counts replies sent in BATCHes."""
        self.po, self._fuse_bytes, self.balancer, self.stats = po, fuse_bytes, balancer, stats
        self._waiting: dict = {}        # worker -> small VALUEs to send together

    def send(self, worker: int, msg: Message) -> None:
        """A reply to a local worker; a small VALUE waits for the others the message being
        handled makes, to go with them in one BATCH (:meth:`flush`)."""
        if self.balancer is not None and msg.kind == Kind.VALUE:
            msg.meta = {"steps": self.balancer.steps(worker, msg.seq)}
            self.balancer.on_reply(worker, msg.seq, time.monotonic())
        if msg.kind == Kind.VALUE and self._fuse_bytes and \
                wire.payload_bytes(msg) < self._fuse_bytes:
            self._waiting.setdefault(worker, []).append(msg)
            return
        self.flush(worker)          # in the order they were made
        self.po.send(worker, msg)

    def flush(self, worker=None) -> None:
        """Send the VALUEs that wait for ``worker`` (None: for every worker), several in a
        BATCH. O(replies)."""
        for who in list(self._waiting) if worker is None else [worker]:
            replies = self._waiting.pop(who, ())
            for first in range(0, len(replies), MAX_MESSAGES):
                part = replies[first:first + MAX_MESSAGES]
                self.po.send(who, part[0] if len(part) == 1 else pack(part))
                self.stats["fused"] += len(part) if len(part) > 1 else 0
