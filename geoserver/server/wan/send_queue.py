"""Prioritized transmission: per-peer queues in front of the Van, most urgent message first.

ZeroMQ sends a peer's messages in the order they were queued, and a global server queues a
whole round's chunks at once: a chunk the next level of a tree is waiting for would sit behind
chunks nobody needs yet. So towards other servers the Van accepts only a few messages at a
time (a small send high-water mark) and the rest wait here, in a heap per peer, ordered by a
priority the caller gives: the data path uses (round, key, chunk), so an older round goes
first and, within a round, lower keys first, the order gluon.Trainer pushes them in
(``priority=-index``) and the next forward pass needs them in. When a peer's socket can take
more, :meth:`SendQueue.flush` hands over the most urgent waiting messages.

Two by-products feed network awareness (:mod:`netstorm.geoserver.server.wan.link_monitor`): a
message that had to wait here is marked ``Flag.QUEUED`` (the link was busy until it left), and a
peer whose messages wait while nothing at all leaves for ``stall_s`` is reported by :meth:`stalled`.
A sender that was away from its sockets for a while (busy, or descheduled on a loaded host:
:meth:`SendQueue.paused`) may have let a link drain and idle; the next message to each waiting peer
then goes unmarked, so that its receiver does not time the idle gap as the link's.

Small chunks that wait for one peer leave together: :meth:`SendQueue.flush` hands the
most urgent waiting chunk, and the chunks smaller than ``fuse_bytes`` right behind it, to the
Van as one BATCH (:mod:`netstorm.geoserver.core.batch`), up to :data:`FUSED_BYTES` of them. Its
receiver times the BATCH as one arrival.

Detours need what was handed over too: a chunk in the kernel's socket buffers or the link's
queue when the link stalls is stuck with it. With ``retain_bytes`` every chunk message handed
over is kept until its round is acknowledged (:meth:`release_before`: the server calls it with
the rounds every key applied, which no total could reach without every chunk of the round),
up to ``retain_bytes`` per peer (the oldest go first beyond it), and :meth:`take` returns them
to be sent another way; the receiver drops what arrives twice.

Messages to one peer with equal priority keep their order. ``send`` is O(log q) for q waiting
messages; nothing is copied.
"""
from __future__ import annotations

import collections
import heapq
import itertools
import time

from ...core import wire
from ...core.batch import CHUNK_KINDS, MAX_MESSAGES, pack
from ...core.van import Van

__all__ = ["FUSED_BYTES", "RETAINED_KINDS", "SEND_HWM", "SendQueue"]

SEND_HWM = 1        # messages ZeroMQ may hold per peer beyond the one being written
FUSED_BYTES = 1 << 18   # a BATCH of chunks holds at most this much (the default chunk's size)
RETAINED_KINDS = (*CHUNK_KINDS, wire.Kind.RELAY)     # what a detour sends again


class SendQueue:
    def __init__(self, van: Van, clock=time.monotonic, retain_bytes: int = 0,
                 fuse_bytes: int = 0):
        """``retain_bytes``: keep the chunk messages handed over to a peer, up to this many
        payload bytes, until their round is acknowledged (they may still sit in socket
        buffers when the link stalls; see :meth:`take`; 0: keep none). ``fuse_bytes``:
        waiting chunks smaller than this leave together (0: never)."""
        self.van = van
        self.fuse_bytes = fuse_bytes
        self.fused = 0                 # chunks that left in a BATCH
        self._clock = clock
        self._heaps: dict = {}
        self._order = itertools.count()
        self._progress: dict = {}      # peer -> when a message last left, or the wait began
        self._retain = retain_bytes
        self._recent: dict = {}        # peer -> deque of chunk messages handed over, unacked
        self._recent_bytes: dict = {}  # peer -> their payload bytes
        self._last_bytes: dict = {}    # peer -> sizes of the last messages handed over
        self._timed: dict = {}         # peer -> when a QUEUED message last left (measurable)
        self._paused: set = set()      # peers whose next message is not marked QUEUED

    def send(self, peer, msg: wire.Message, priority: tuple = ()) -> None:
        """Send ``msg`` to ``peer`` (already connected) now if its socket takes it, else
        queue it by ``priority`` (lower first; ``()`` before any tuple)."""
        heap = self._heaps.setdefault(peer, [])
        waited = bool(heap)
        if not waited:
            if self.van.try_send(peer, msg):
                self._handed(peer, [msg])
                return
            self._progress[peer] = self._clock()       # the wait starts now
        msg.flags |= wire.Flag.QUEUED
        heapq.heappush(heap, (priority, next(self._order), msg))
        if waited:         # the socket may have room by now; it just refused this one
            self.flush(peer)

    def flush(self, peer) -> None:
        """Hand ``peer``'s most urgent messages to the Van until its queue is full."""
        heap = self._heaps.get(peer)
        while heap:
            if peer in self._paused:        # the link may have idled before this one
                heap[0][2].flags &= ~wire.Flag.QUEUED
            taken, size = self._small_ones(heap)
            if len(taken) > 1:
                if not self.van.try_send(peer, pack([item[2] for item in taken])):
                    for item in taken:
                        heapq.heappush(heap, item)
                    return
                self.fused += len(taken)
            elif not self.van.try_send(peer, heap[0][2]):
                return
            else:
                taken, size = [heapq.heappop(heap)], None
            self._paused.discard(peer)
            self._handed(peer, [item[2] for item in taken], size)

    def _small_ones(self, heap) -> list:
        """The most urgent waiting whole chunks (no part of one: those carry meta) while
        each is smaller than ``fuse_bytes``, taken
        off ``heap`` (up to :data:`FUSED_BYTES` and :data:`~netstorm.geoserver.core.batch.
        MAX_MESSAGES`), with their frames' bytes; ``([], 0)`` if fewer than two. O(k log q)."""
        taken, total = [], 0
        while heap and len(taken) < MAX_MESSAGES and heap[0][2].kind in CHUNK_KINDS and \
                not heap[0][2].meta:        # whole chunks only: the BATCH's meta stays small
            size = wire.payload_bytes(heap[0][2])
            if size >= self.fuse_bytes or total + size > FUSED_BYTES:
                break
            total += size
            taken.append(heapq.heappop(heap))
        if len(taken) == 1:                 # alone: it goes as itself
            heapq.heappush(heap, taken.pop())
            return [], 0
        return taken, total

    def paused(self) -> None:
        """The sender was away from its sockets long enough for a waiting peer's socket to
        drain: the next message each such peer gets is not marked QUEUED. O(peers)."""
        self._paused.update(self.backlogged())

    def _handed(self, peer, messages: list, size=None) -> None:
        """``messages`` (one, or those of a BATCH) left for ``peer``; ``size``: their
        frames' bytes, if known."""
        self._progress[peer] = self._clock()
        if messages[0].flags & wire.Flag.QUEUED:
            self._timed[peer] = self._progress[peer]
        sizes = self._last_bytes.get(peer)
        if sizes is None:
            sizes = self._last_bytes[peer] = collections.deque(maxlen=SEND_HWM + 2)
        sizes.append(sum(map(wire.payload_bytes, messages)) if size is None else size)
        if self._retain:
            self._keep(peer, [m for m in messages if m.kind in RETAINED_KINDS])

    def _keep(self, peer, messages: list) -> None:
        """Retain ``messages`` for ``peer`` until acknowledged, the oldest dropped beyond
        ``retain_bytes``. O(messages)."""
        recent = self._recent.setdefault(peer, collections.deque())
        kept = self._recent_bytes.get(peer, 0)
        for msg in messages:
            recent.append(msg)
            kept += wire.payload_bytes(msg)
        while kept > self._retain and len(recent) > 1:
            kept -= wire.payload_bytes(recent.popleft())
        self._recent_bytes[peer] = kept

    def release_before(self, rnd: int) -> int:
        """Rounds before ``rnd`` are acknowledged (every key applied them here): forget
        their chunk messages. How many were forgotten. O(messages retained)."""
        dropped = 0
        for peer, recent in self._recent.items():
            kept = [m for m in recent if m.seq >= rnd]
            dropped += len(recent) - len(kept)
            if len(kept) < len(recent):
                self._recent[peer] = collections.deque(kept)
                self._recent_bytes[peer] = sum(map(wire.payload_bytes, kept))
        return dropped

    def retained(self, peer=None) -> int:
        """Chunk messages handed over and not yet acknowledged (for ``peer``, or all)."""
        if peer is not None:
            return len(self._recent.get(peer, ()))
        return sum(map(len, self._recent.values()))

    def last_timed(self, peer) -> float:
        """When a message to ``peer`` that had waited here (so followed another back to back,
        which its receiver can time) was last handed over (0.0: never)."""
        return self._timed.get(peer, 0.0)

    def backlogged(self) -> list:
        """Peers with messages waiting here: poll them for writability."""
        return [peer for peer, heap in self._heaps.items() if heap]

    def stalled(self, allowed_s) -> list:
        """Peers with messages waiting here of which none left for longer than
        ``allowed_s(peer, bytes)``, where ``bytes`` is what the last few messages handed
        over hold (they may all still be ahead in ZeroMQ's and the socket's buffers: big
        messages on a slow link legitimately hold the queue that long)."""
        now = self._clock()
        return [peer for peer in self.backlogged()
                if now - self._progress[peer]
                >= allowed_s(peer, sum(self._last_bytes.get(peer, ())))]

    def take(self, peer) -> tuple:
        """Remove, to send them another way: ``(handed, waiting)``, the chunk messages
        handed over and not acknowledged (which may still be stuck in buffers, or may
        arrive) and every message waiting for ``peer``, most urgent first."""
        heap = self._heaps.pop(peer, [])
        self._recent_bytes.pop(peer, None)
        return list(self._recent.pop(peer, ())), [item[2] for item in sorted(heap)]

    def take_waiting(self, peer, select) -> list:
        """Remove and return, most urgent first, the messages waiting for ``peer`` for which
        ``select(msg)`` holds (to send them another way); the rest keep their places."""
        heap = self._heaps.get(peer)
        if not heap:
            return []
        taken = sorted(item for item in heap if select(item[2]))
        if taken:
            kept = [item for item in heap if not select(item[2])]
            heapq.heapify(kept)
            self._heaps[peer] = kept
        return [item[2] for item in taken]

    def waiting(self, peer=None) -> int:
        """How many messages wait here (for ``peer``, or for all peers)."""
        if peer is not None:
            return len(self._heaps.get(peer, ()))
        return sum(len(h) for h in self._heaps.values())
