"""How a key's initial value reaches every DC: a local worker's INIT goes out once, each DC
passing it on to the next, along the widest paths out of its origin when the WAN's links
are known (``settings.links``), else along the first tree of the first policy (its links
taken undirected): over those links only, once per link, instead of from the origin to
every other DC.

Another DC's INIT that comes before the first policy waits for it (the way on depends on
it), at most :data:`~netstorm.geoserver.config.settings.MAX_EARLY_MESSAGES`. O(children) per
INIT.
"""
from __future__ import annotations

import dataclasses
import logging

from ..config.settings import MAX_EARLY_MESSAGES
from ..core import wire
from ..core.wire import Kind, Message
from ..policy.tree import PolicyError, widest_children
from .local_store import RequestError

__all__ = ["InitSpread"]

log = logging.getLogger("netstorm.server")


class InitSpread:
    """Sends and passes on one DC server's INITs to the other DCs."""

    def __init__(self, dc: str, store, policies, wan, links, drops):
        """``links``: the WAN's links (``settings.links``, may be empty); ``drops``: the
        server's rate-limited log."""
        self.dc, self.store, self.policies, self.wan = dc, store, policies, wan
        self.links, self._drops = links, drops
        self._early: list = []      # other DCs' INITs that came before the first policy

    def forward(self, entry, generation) -> None:
        """A local worker's initial value of ``entry`` goes to the other DCs."""
        self.spread(Message(Kind.INIT, key=entry.key, seq=generation,
                            flags=wire.Flag.HAS_VALUE,
                            meta={"shape": list(entry.shape), "dtype": entry.dtype.str,
                                  "origin": self.dc,
                                  **({"stype": "row_sparse"} if entry.sparse else {})},
                            dtype=entry.dtype, frames=[entry.value]))

    def on_peer_init(self, source: str, msg: Message) -> None:
        """``source``'s server passed on an INIT: declare the key here and pass it on."""
        if self.policies.empty:                 # the way on depends on the first policy
            if len(self._early) < MAX_EARLY_MESSAGES:
                self._early.append(msg)
            else:
                self._drops.log(source, "%s: dropped INIT of key %d from %s: %d INITs "
                                "already wait for the first policy", self.dc, msg.key,
                                source, MAX_EARLY_MESSAGES)
            return
        try:
            self.store.on_init(msg)
        except (RequestError, wire.WireError) as exc:
            log.error("%s: bad INIT of key %d from %s: %s", self.dc, msg.key, source, exc)
            return
        self.spread(msg)

    def take_early(self) -> list:
        """The INITs that waited for the first policy, oldest first (once)."""
        early, self._early = self._early, []
        return early

    def spread(self, msg: Message) -> None:
        origin = str(msg.meta.get("origin"))
        try:
            children = widest_children(origin, self.dc, self.links) if self.links else \
                self.policies.for_round(0).trees[0].children_from(origin, self.dc)
        except PolicyError as exc:
            log.error("%s: cannot pass on INIT of key %d: %s", self.dc, msg.key, exc)
            return
        for dc in children:           # a copy per child: the Van stamps its sender on it
            self.wan.send(dc, dataclasses.replace(msg))     # ahead of any chunk
