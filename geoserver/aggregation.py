"""Aggregate-forward along a policy's trees: the WAN data path of one global server.

Pure logic: :class:`TreeExchange` never touches a socket. It is told about the DC's own sum
of a chunk and about chunks arriving from neighbours, and answers through two callbacks:
``send(dc, kind, key, chunk, rnd, array)`` and ``deliver(key, chunk, rnd, total)``.

Arrays handed in are never modified (they may be zero-copy views of received frames or
buffers already queued for sending); sums allocate.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from .tree import Policy
from .wire import Kind

log = logging.getLogger(__name__)


@dataclass
class _Partial:
    acc: object = None
    owned: bool = False          # acc was allocated here and may be added into in place
    heard: set = field(default_factory=set)


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
    def __init__(self, dc: str, policy: Policy, send, deliver):
        self.dc = dc
        self.policy = policy
        self._send = send
        self._deliver = deliver
        self._partials: dict = {}
        self._aggregated = RoundSet()   # chunks whose sum this DC completed (sent up or down)
        self._delivered = RoundSet()    # chunks whose total this DC received

    def _add(self, ident, source: str, array) -> None:
        tree = self.policy.tree_for(ident[0], ident[1])
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
        children = tree.children(self.dc)
        if len(part.heard) < 1 + len(children):
            return
        del self._partials[ident]
        self._aggregated.add(ident)
        key, chunk, rnd = ident
        parent = tree.parent[self.dc]
        if parent is None:
            self._finish(tree, ident, part.acc)
        else:
            self._send(parent, Kind.CHUNK_UP, key, chunk, rnd, part.acc)

    def _finish(self, tree, ident, total) -> None:
        if ident in self._delivered:
            log.warning("%s: dropped duplicate total of chunk %s", self.dc, ident)
            return
        self._delivered.add(ident)
        key, chunk, rnd = ident
        for child in tree.children(self.dc):
            self._send(child, Kind.CHUNK_DOWN, key, chunk, rnd, total)
        self._deliver(key, chunk, rnd, total)

    def contribute(self, key: int, chunk: int, rnd: int, array) -> None:
        """This DC's own (locally aggregated) sum of a chunk for round ``rnd``."""
        self._add((key, chunk, rnd), self.dc, array)

    def on_up(self, source: str, key: int, chunk: int, rnd: int, array) -> None:
        tree = self.policy.tree_for(key, chunk)
        if tree.parent.get(source) != self.dc:
            log.warning("%s: dropped CHUNK_UP of key %d chunk %d from %s, which is not a "
                        "child here in the tree rooted at %s", self.dc, key, chunk, source,
                        tree.root)
            return
        self._add((key, chunk, rnd), source, array)

    def on_down(self, source: str, key: int, chunk: int, rnd: int, array) -> None:
        tree = self.policy.tree_for(key, chunk)
        if tree.parent.get(self.dc) != source:
            log.warning("%s: dropped CHUNK_DOWN of key %d chunk %d from %s, which is not "
                        "the parent here in the tree rooted at %s", self.dc, key, chunk,
                        source, tree.root)
            return
        self._finish(tree, (key, chunk, rnd), array)

    @property
    def in_flight(self) -> int:
        return len(self._partials)
