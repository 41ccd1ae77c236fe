"""Aggregate-forward along a policy's trees: the WAN data path of one global server.

Pure logic: :class:`TreeExchange` never touches a socket. It is told about the DC's own sum
of a chunk and about chunks arriving from neighbours, and answers through two callbacks:
``send(dc, kind, chunk_id, array)`` and ``deliver(key, chunk, rnd, total)``, where a
:class:`ChunkId` names the key, chunk, round, policy version and tree. A chunk of a policy
version this DC does not know yet (sent ahead by a faster DC) waits until the scheduler's
announcement of that version arrives.

Arrays handed in are never modified (they may be zero-copy views of received frames or
buffers already queued for sending); sums allocate.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .tree import PolicyBook
from .wire import Kind

log = logging.getLogger(__name__)


@dataclass
class _Partial:
    acc: object = None
    owned: bool = False          # acc was allocated here and may be added into in place
    heard: set = field(default_factory=set)


class ChunkId(NamedTuple):
    key: int
    chunk: int
    rnd: int
    version: int
    tree: int


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


class TreeExchange:
    def __init__(self, dc: str, policies: PolicyBook, send, deliver):
        self.dc = dc
        self.policies = policies
        self._send = send
        self._deliver = deliver
        self._partials: dict = {}
        self._aggregated = RoundSet()   # chunks whose sum this DC completed (sent up or down)
        self._delivered = RoundSet()    # chunks whose total this DC received
        self._waiting: list = []        # (handler, args) of chunks of unknown policy versions

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
            log.warning("%s: dropped duplicate contribution from %s to chunk %s",
                        self.dc, source, ident)
            return
        part.heard.add(source)
        if part.acc is None:
            part.acc = array
        elif part.owned:
            np.add(part.acc, array, out=part.acc)
        else:
            part.acc = part.acc + array
            part.owned = True
        if len(part.heard) < 1 + len(tree.children(self.dc)):
            return
        del self._partials[ident]
        self._aggregated.add(ident)
        parent = tree.parent[self.dc]
        if parent is None:
            self._finish(tree, cid, part.acc)
        else:
            self._send(parent, Kind.CHUNK_UP, cid, part.acc)

    def _finish(self, tree, cid: ChunkId, total) -> None:
        if cid[:3] in self._delivered:
            log.warning("%s: dropped duplicate total of chunk %s", self.dc, cid[:3])
            return
        self._delivered.add(cid[:3])
        for child in tree.children(self.dc):
            self._send(child, Kind.CHUNK_DOWN, cid, total)
        self._deliver(cid.key, cid.chunk, cid.rnd, total)

    def contribute(self, cid: ChunkId, array) -> None:
        """This DC's own (locally aggregated) sum of a chunk."""
        self._add(cid, self.dc, array)

    def _known(self, handler, source, cid, array) -> bool:
        if cid.version in self.policies:
            return True
        log.info("%s: chunk %s of policy %d, not yet announced here: held until it is",
                 self.dc, cid[:3], cid.version)
        self._waiting.append((handler, (source, cid, array)))
        return False

    def on_up(self, source: str, cid: ChunkId, array) -> None:
        if not self._known(self.on_up, source, cid, array):
            return
        tree = self._tree(cid)
        if tree.parent.get(source) != self.dc:
            log.warning("%s: dropped CHUNK_UP of key %d chunk %d from %s, which is not a "
                        "child here in the tree rooted at %s", self.dc, cid.key, cid.chunk,
                        source, tree.root)
            return
        self._add(cid, source, array)

    def on_down(self, source: str, cid: ChunkId, array) -> None:
        if not self._known(self.on_down, source, cid, array):
            return
        tree = self._tree(cid)
        if tree.parent.get(self.dc) != source:
            log.warning("%s: dropped CHUNK_DOWN of key %d chunk %d from %s, which is not "
                        "the parent here in the tree rooted at %s", self.dc, cid.key,
                        cid.chunk, source, tree.root)
            return
        self._finish(tree, cid, array)

    def on_chunk(self, source: str, kind: Kind, cid: ChunkId, array) -> None:
        """A whole chunk from neighbour ``source``, as the WAN transport delivers it: a
        partial sum going up (``CHUNK_UP``) or a total coming down. A chunk naming a tree
        its policy does not have is logged and dropped."""
        try:
            if kind == Kind.CHUNK_UP:
                self.on_up(source, cid, array)
            else:
                self.on_down(source, cid, array)
        except IndexError as exc:
            log.warning("%s: dropped %s of key %d from %s: %s", self.dc, kind.name, cid.key,
                        source, exc)

    def policy_added(self) -> None:
        """Replay the chunks that were waiting for a policy version now known."""
        waiting, self._waiting = self._waiting, []
        for handler, args in waiting:
            handler(*args)

    @property
    def in_flight(self) -> int:
        return len(self._partials)
