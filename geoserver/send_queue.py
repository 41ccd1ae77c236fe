"""Prioritized transmission: per-peer queues in front of the Van, most urgent message first.

ZeroMQ sends a peer's messages in the order they were queued, and a global server queues a
whole round's chunks at once: a chunk the next level of a tree is waiting for would sit behind
chunks nobody needs yet. So towards other servers the Van accepts only a few messages at a
time (a small send high-water mark) and the rest wait here, in a heap per peer, ordered by a
priority the caller gives: the data path uses (round, key, chunk), so an older round goes
first and, within a round, lower keys first, the order gluon.Trainer pushes them in
(``priority=-index``) and the next forward pass needs them in. When a peer's socket can take
more, :meth:`SendQueue.flush` hands over the most urgent waiting messages.

Messages to one peer with equal priority keep their order. ``send`` is O(log q) for q waiting
messages; nothing is copied.
"""
from __future__ import annotations

import heapq
import itertools

from . import wire
from .van import Van

SEND_HWM = 1        # messages ZeroMQ may hold per peer beyond the one being written


class SendQueue:
    def __init__(self, van: Van):
        self.van = van
        self._heaps: dict = {}
        self._order = itertools.count()

    def send(self, peer, msg: wire.Message, priority: tuple = ()) -> None:
        """Queue ``msg`` for ``peer`` (already connected) and send what the socket takes."""
        heap = self._heaps.setdefault(peer, [])
        heapq.heappush(heap, (priority, next(self._order), msg))
        self.flush(peer)

    def flush(self, peer) -> None:
        """Hand ``peer``'s most urgent messages to the Van until its queue is full."""
        heap = self._heaps.get(peer)
        while heap and self.van.try_send(peer, heap[0][2]):
            heapq.heappop(heap)

    def backlogged(self) -> list:
        """Peers with messages waiting here: poll them for writability."""
        return [peer for peer, heap in self._heaps.items() if heap]

    def waiting(self, peer=None) -> int:
        """How many messages wait here (for ``peer``, or for all peers)."""
        if peer is not None:
            return len(self._heaps.get(peer, ()))
        return sum(len(h) for h in self._heaps.values())
