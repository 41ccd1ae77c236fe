"""Aggregate-forward along a policy's trees: the WAN data path of one global server.

Partial sums climb a tree's aggregation edges (``Tree.parent``) to its root; the total
descends its broadcast edges (``Tree.down_parent``: the same edges for a shared tree, a
tree of its own for a split one).

Pure logic: :class:`TreeExchange` never touches a socket. It is told about the DC's own sum
of a chunk and about chunks arriving from neighbours, and answers through two callbacks:
``send(dc, kind, chunk_id, array, encoded)`` and ``deliver(key, chunk, rnd, total)``, where
a :class:`ChunkId` names the key, chunk, round, policy version and tree.

With a ``codec`` (:class:`~netstorm.geoserver.compression.feedback.WanCodec`) partial
sums are compressed at every hop with this DC's error feedback, and the root compresses
the total once: it and every other DC apply the decoded bytes of that one payload, which
the DCs on the way down pass on unchanged, so replicas stay bit-identical. Without one,
chunks travel dense. The codec is told where a chunk lies in its key by the layout the
store cut this DC's contribution with (``contribute(cid, array, where)``), kept from the
contribution until the chunk's total is delivered. A chunk of a policy
version this DC does not know yet (sent ahead by a faster DC) waits until the scheduler's
announcement of that version arrives.

Arrays handed in are never modified (they may be zero-copy views of received frames or
buffers already queued for sending); sums allocate.

What a neighbour makes this DC keep is bounded: a chunk of a round more than
``rounds_ahead`` beyond the latest round this DC contributed is dropped, and so is one that
would take the bytes kept for that neighbour (partial sums it started, chunks waiting for a
policy version) over ``held_bytes``; a chunk whose size or dtype differs from the partial
sum it joins is dropped too. Each drop is logged, rate-limited per neighbour.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field


import numpy as np

from .buffer_pool import BufferPool
from ..core.ratelog import RateLimitedLog
from ..config.settings import MAX_HELD_BYTES_PER_PEER, MAX_ROUNDS_AHEAD
from ..compression.feedback import DOWN, UP, DenseCodec
from ..policy.chunking import ENTRY_BYTES, ChunkId
from ..policy.tree import PolicyBook
from ..core.wire import Kind, WireError

__all__ = ["RoundSet", "TreeExchange"]

log = logging.getLogger(__name__)


def _cost(array) -> int:
    return array.nbytes + ENTRY_BYTES


@dataclass
class _Partial:
    acc: object = None
    owned: bool = False          # acc was allocated here and may be added into in place
    heard: set = field(default_factory=set)
    charged: tuple = ()          # (neighbour, bytes) when a neighbour's array started it


class RoundSet:
    """Which rounds of each (key, chunk) happened, in O(rounds in flight) memory: every round
    up to a watermark, plus the few beyond it."""

    def __init__(self):
        self._upto: dict = {}
        self._ahead: dict = {}

    def __contains__(self, ident) -> bool:
        key, chunk, rnd = ident
        return rnd <= self._upto.get((key, chunk), 0) or rnd in self._ahead.get((key, chunk), ())

    def add(self, ident) -> None:
        key, chunk, rnd = ident
        ahead = self._ahead.setdefault((key, chunk), set())
        ahead.add(rnd)
        upto = self._upto.get((key, chunk), 0)
        while upto + 1 in ahead:
            upto += 1
            ahead.discard(upto)
        self._upto[(key, chunk)] = upto

    def forget_after(self, rounds: dict) -> None:
        """Forget the rounds of each key beyond ``rounds[key]``: they happen again (a lost
        DC's server was replaced, docs/recovery.md). O(chunks known)."""
        for ident in set(self._upto) | set(self._ahead):
            last = rounds.get(ident[0])
            if last is not None:
                self._upto[ident] = min(self._upto.get(ident, 0), last)
                self._ahead[ident] = {r for r in self._ahead.get(ident, ()) if r <= last}


class TreeExchange:
    def __init__(self, dc: str, policies: PolicyBook, send, deliver,
                 rounds_ahead: int = MAX_ROUNDS_AHEAD, held_bytes: int = MAX_HELD_BYTES_PER_PEER,
                 codec=None):
        self.dc = dc
        self.codec = codec or DenseCodec()
        self.policies = policies
        self._send_to = send
        self.sent = {"chunks": 0, "encoded": 0, "bytes": 0}    # what this DC sent, WAN
        self._deliver = deliver
        self._partials: dict = {}
        self._aggregated = RoundSet()   # chunks whose sum this DC completed (sent up or down)
        self._delivered = RoundSet()    # chunks whose total this DC received
        self._waiting: list = []        # (handler, args) of chunks of unknown policy versions
        self.rounds_ahead = rounds_ahead
        self.held_bytes = held_bytes
        self.own_round = 0              # the latest round this DC contributed
        self.floor = 0                  # chunks of older policy versions are stale (a lost
                                        # DC's rounds in flight, replayed under this one)
        self.held: dict = {}            # neighbour -> bytes kept here for it
        self._where: dict = {}          # (key, chunk, round) -> (start, stop, key size) of
                                        # this DC's contribution, until its total is delivered
        self.buffers = BufferPool()     # partial sums, reused round after round
        self._drops = RateLimitedLog(log)
        self._holds = RateLimitedLog(log, level=logging.INFO)

    def _send(self, dc: str, kind: Kind, cid: ChunkId, array, encoded: bool = False) -> None:
        self.sent["chunks"] += 1
        self.sent["encoded"] += bool(encoded)
        self.sent["bytes"] += array.nbytes
        self._send_to(dc, kind, cid, array, encoded)

    def _tree(self, cid: ChunkId):
        trees = self.policies[cid.version].trees
        if cid.tree >= len(trees):
            raise IndexError(f"policy {cid.version} has {len(trees)} trees, not {cid.tree + 1}")
        return trees[cid.tree]

    def _add(self, cid: ChunkId, source: str, array) -> None:
        tree = self._tree(cid)
        ident = cid[:3]
        part = self._partials.setdefault(ident, _Partial())
        if source in part.heard or ident in self._aggregated:
            self._drops.log(source, "%s: dropped duplicate contribution from %s to chunk %s",
                            self.dc, source, ident)
            return
        if part.acc is not None and (len(part.acc) != len(array) or
                                     part.acc.dtype != array.dtype):
            self._drops.log(source, "%s: dropped contribution from %s to chunk %s: %d x %s, "
                            "the partial sum is %d x %s", self.dc, source, ident, len(array),
                            array.dtype, len(part.acc), part.acc.dtype)
            return
        part.heard.add(source)
        if part.acc is None:
            if source != self.dc:
                part.charged = (source, _cost(array))
                self.held[source] = self.held.get(source, 0) + _cost(array)
            part.acc = array
        elif part.owned:
            np.add(part.acc, array, out=part.acc)
        else:
            part.acc = self.buffers.add(part.acc, array)
            part.owned = True
        if len(part.heard) < 1 + len(tree.children(self.dc)):
            return
        del self._partials[ident]
        self._release(*part.charged)
        self._aggregated.add(ident)
        parent = tree.parent[self.dc]
        where = self._where.get(ident)
        if parent is None:
            wire, encoded = self.codec.encode(cid, part.acc, DOWN, where)
            self._finish(tree, cid, wire, encoded, self.codec.decode(cid, wire, encoded, where))
        else:
            self._send(parent, Kind.CHUNK_UP, cid,
                       *self.codec.encode(cid, part.acc, UP, where))

    def _finish(self, tree, cid: ChunkId, wire, encoded: bool, total) -> None:
        """Pass the total's bytes (``wire``, as received or encoded by the root) to the
        children and deliver the dense ``total`` they decode to."""
        if cid[:3] in self._delivered:
            log.warning("%s: dropped duplicate total of chunk %s", self.dc, cid[:3])
            return
        self._delivered.add(cid[:3])
        self._where.pop(cid[:3], None)
        for child in tree.down_children(self.dc):
            self._send(child, Kind.CHUNK_DOWN, cid, wire, encoded)
        self._deliver(cid.key, cid.chunk, cid.rnd, total)

    def contribute(self, cid: ChunkId, array, where=None) -> None:
        """This DC's own (locally aggregated) sum of a chunk; ``where``: ``(start, stop,
        key size)`` of the chunk in its key, from the store's layout (compression needs it;
        without it the chunk travels dense)."""
        self.own_round = max(self.own_round, cid.rnd)
        if where is not None and cid[:3] not in self._delivered:
            self._where[cid[:3]] = where
        self._add(cid, self.dc, self.codec.own(cid, array, where))

    def _release(self, source=None, nbytes: int = 0) -> None:
        if source is not None:
            self.held[source] -= nbytes
            if not self.held[source]:
                del self.held[source]

    def _admit(self, kind: str, source: str, cid: ChunkId, array, window: bool = True) -> bool:
        """Whether a neighbour's chunk is within the bounds (the round window, unless not
        ``window``, and the bytes kept for ``source`` if it is kept); logged when not."""
        if window and cid.rnd > self.own_round + self.rounds_ahead:
            why = (f"round {cid.rnd} is more than {self.rounds_ahead} rounds ahead of this "
                   f"DC's round {self.own_round}")
        elif self.held.get(source, 0) + _cost(array) > self.held_bytes:
            why = (f"{self.held.get(source, 0)} bytes are already kept for {source} (at most "
                   f"{self.held_bytes})")
        else:
            return True
        self._drops.log(source, "%s: dropped %s of key %d chunk %d from %s: %s", self.dc, kind,
                        cid.key, cid.chunk, source, why)
        return False

    def restart(self, floor: int) -> None:
        """A lost DC's server is being replaced (docs/recovery.md): every partial sum and
        every chunk held for an unknown version is dropped, and from now on so is any chunk
        of a version below ``floor`` (the replay policy's). O(chunks held)."""
        self.floor = max(self.floor, floor)
        self._partials.clear()
        self._where.clear()
        self._waiting = [w for w in self._waiting if w[1][1].version >= self.floor]
        self.held = {}
        for _, (source, _, array, _) in self._waiting:
            self.held[source] = self.held.get(source, 0) + _cost(array)

    def forget_after(self, rounds: dict) -> None:
        """The rounds of each key beyond ``rounds[key]`` are summed again, under the replay
        policy. This DC is at those rounds from now on (a replacement starts at round 0):
        the survivors' replayed chunks are within its window, not dropped as too far ahead."""
        self._aggregated.forget_after(rounds)
        self._delivered.forget_after(rounds)
        self.own_round = max(self.own_round, max(rounds.values(), default=0))

    def _known(self, handler, source, cid, array, encoded) -> bool:
        if cid.version < self.floor:
            self._drops.log(source, "%s: dropped chunk %s of policy %d from %s: replaced by "
                            "policy %d after a server was lost", self.dc, cid[:3],
                            cid.version, source, self.floor)
            return False
        if cid.version in self.policies:
            return True
        # no round window for a policy not yet announced (the held bytes bound it): a new
        # server learns its rounds with the replay policy, after the survivors' first chunks
        if not self._admit("a chunk of an unknown policy", source, cid, array, window=False):
            return False
        self._holds.log(source, "%s: chunk %s of policy %d, not yet announced here: held "
                        "until it is", self.dc, cid[:3], cid.version)
        self.held[source] = self.held.get(source, 0) + _cost(array)
        self._waiting.append((handler, (source, cid, array, encoded)))
        return False

    def on_up(self, source: str, cid: ChunkId, array, encoded: bool = False) -> None:
        if not self._admit("CHUNK_UP", source, cid, array, cid.version in self.policies) \
                or not self._known(self.on_up, source, cid, array, encoded):
            return
        tree = self._tree(cid)
        if tree.parent.get(source) != self.dc:
            self._drops.log(source, "%s: dropped CHUNK_UP of key %d chunk %d from %s, which "
                            "is not a child here in the tree rooted at %s", self.dc, cid.key,
                            cid.chunk, source, tree.root)
            return
        self._add(cid, source, self.codec.decode(cid, array, encoded,
                                                 self._where.get(cid[:3])))

    def on_down(self, source: str, cid: ChunkId, array, encoded: bool = False) -> None:
        if cid.rnd > self.own_round + self.rounds_ahead and cid.version in self.policies:
            self._admit("CHUNK_DOWN", source, cid, array)       # logs the drop
            return
        if not self._known(self.on_down, source, cid, array, encoded):
            return
        tree = self._tree(cid)
        if tree.down_parent.get(self.dc) != source:
            self._drops.log(source, "%s: dropped CHUNK_DOWN of key %d chunk %d from %s, which "
                            "is not the broadcast parent here in the tree rooted at %s", self.dc,
                            cid.key, cid.chunk, source, tree.root)
            return
        self._finish(tree, cid, array, encoded,
                     self.codec.decode(cid, array, encoded, self._where.get(cid[:3])))

    def on_chunk(self, source: str, kind: Kind, cid: ChunkId, array,
                 encoded: bool = False) -> None:
        """A whole chunk from neighbour ``source``, as the WAN transport delivers it: a
        partial sum going up (``CHUNK_UP``) or a total coming down, dense or a compressed
        payload (``encoded``). A chunk naming a tree its policy does not have, or whose
        payload does not decode to the chunk, is logged and dropped."""
        try:
            if kind == Kind.CHUNK_UP:
                self.on_up(source, cid, array, encoded)
            else:
                self.on_down(source, cid, array, encoded)
        except (IndexError, WireError) as exc:
            self._drops.log(source, "%s: dropped %s of key %d from %s: %s", self.dc, kind.name,
                            cid.key, source, exc)

    def policy_added(self) -> None:
        """Replay the chunks that were waiting for a policy version now known."""
        waiting, self._waiting = self._waiting, []
        for handler, (source, cid, array, encoded) in waiting:
            if cid.version in self.policies:
                self._release(source, _cost(array))
                try:
                    handler(source, cid, array, encoded)
                except (IndexError, WireError) as exc:
                    self._drops.log(source, "%s: dropped chunk %s from %s: %s", self.dc,
                                    cid[:3], source, exc)
            else:
                self._waiting.append((handler, (source, cid, array, encoded)))

    @property
    def in_flight(self) -> int:
        return len(self._partials)

    @property
    def waiting(self) -> int:
        """Chunks held for policy versions not announced yet."""
        return len(self._waiting)
