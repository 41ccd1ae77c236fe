"""The bulk channel's keys between DC servers (:mod:`netstorm.geoserver.core.bulk_channel`).

For every other DC this server draws a 32-byte key (``os.urandom``) per epoch for the
direction *this server -> that DC* and sends it over CURVE in a LINK_KEY (one uint8 frame,
meta ``{epoch, cipher}``). The receiver installs an opener for that link and answers
LINK_KEY_DONE with its bulk ROUTER's address and the largest frame it takes; from then on
this server's whole chunks for that DC go sealed on the bulk channel, and until then on
CURVE. Epochs start at 1 and grow by one each time the peer's server is replaced (a new
process: a new key, a new connection). Keys never travel anywhere but inside CURVE.

Every LINK_KEY and LINK_KEY_DONE has passed schema and role checks (a server of another DC,
over CURVE, whose key names that DC) before it reaches here; what is checked here is the
rest: the epoch is the one this server sent, the address is a TCP address on the host the
node table gives that server. O(1) per message; O(DCs) at start.
"""
from __future__ import annotations

import logging
import os
from urllib.parse import urlsplit

import numpy as np

from ...core import bulk_channel
from ...core.ratelog import RateLimitedLog
from ...core.wire import Kind, Message
from .send_queue import SEND_HWM

__all__ = ["CIPHER", "ENCODED_SLACK", "LinkKeys"]

log = logging.getLogger(__name__)

CIPHER = "aegis256"
ENCODED_SLACK = 64 * 1024   # a compressed chunk's payload may exceed chunk_bytes by its own
                            # small header; larger frames simply stay on CURVE


class LinkKeys:
    def __init__(self, dc: str, dcs: list, servers: dict, postoffice, send, chunk_bytes: int):
        """``dcs``: every DC in the node table's order (indices name links in the AEAD's
        nonce and AAD); ``servers``: DC -> server node id; ``send(dc, msg)``: over CURVE."""
        self.dc = dc
        self.index = {name: i for i, name in enumerate(dcs)}
        self.servers = servers
        self.dc_of = {node: name for name, node in servers.items()}
        self.po = postoffice
        self.van = postoffice.van
        self._send = send
        self._epochs: dict = {}         # peer DC -> epoch of the latest key this server sent
        self._pending: dict = {}        # peer DC -> (epoch, BulkSealer) not yet acknowledged
        self._drops = RateLimitedLog(log)
        self.on = getattr(self.van, "bulk", None) is not None     # (a test double has none)
        if self.on:
            self.van.bulk.limit(bulk_channel.bulk_frame_bytes(chunk_bytes + ENCODED_SLACK))
            self.admit()

    def admit(self) -> None:
        """Admit on the bulk port the addresses of the node table's servers, this one's
        included: a peer on this host (several loopback addresses, one machine) connects
        from this server's own address."""
        addresses = [self.po.table[node].address for node in self.servers.values()]
        self.van.zap.allow_bulk(bulk_channel.hosts_of(addresses))

    def start(self, dcs=None) -> None:
        """Send a fresh key to each of ``dcs`` (None: every other DC)."""
        if not self.on:
            return
        from ... import _dataplane
        for dc in (dcs if dcs is not None else list(self.servers)):
            if dc == self.dc:
                continue
            epoch = self._epochs.get(dc, 0) + 1
            key = bytearray(os.urandom(32))
            sealer = _dataplane.BulkSealer(key, self.index[self.dc], self.index[dc], epoch)
            old = self._pending.pop(dc, None)
            if old is not None:
                old[1].close()
            self._epochs[dc] = epoch
            self._pending[dc] = (epoch, sealer)
            self._send(dc, Message(Kind.LINK_KEY, dtype=np.dtype(np.uint8),
                                   frames=[np.frombuffer(key, dtype=np.uint8)],
                                   meta={"epoch": epoch, "cipher": CIPHER}))

    def on_link_key(self, msg: Message) -> None:
        """A peer's key for its chunks to this server: install it, answer with this
        server's bulk address."""
        dc = self.dc_of[msg.sender]
        if not self.on:
            self._drops.log(("off", dc), "%s: DC %s offered a bulk link key; the bulk channel "
                            "is off here, its chunks stay on CURVE", self.dc, dc)
            return
        from ... import _dataplane
        epoch = msg.meta["epoch"]
        opener = _dataplane.BulkOpener(msg.frames[0], self.index[dc], self.index[self.dc], epoch)
        self.van.bulk.expect(dc, self.index[dc], msg.sender, opener)
        log.info("%s: bulk link key from %s installed (epoch %d)", self.dc, dc, epoch)
        self._send(dc, Message(Kind.LINK_KEY_DONE, meta={
            "epoch": epoch, "address": self.van.bulk.address,
            "max_frame": self.van.bulk.max_frame}))

    def on_link_key_done(self, msg: Message) -> None:
        """A peer installed this server's key: its chunks go on the bulk channel now."""
        dc = self.dc_of[msg.sender]
        epoch, address = msg.meta["epoch"], msg.meta["address"]
        pending = self._pending.get(dc)
        if pending is None or pending[0] != epoch:
            self._drops.log(("done", dc), "%s: ignored LINK_KEY_DONE from %s for epoch %d (%s)",
                            self.dc, dc, epoch, "none pending" if pending is None else
                            f"epoch {pending[0]} pending")
            return
        why = self._bad_address(dc, address)
        if why:
            self._drops.log(("address", dc), "%s: refused the bulk address of %s: %s; its "
                            "chunks stay on CURVE", self.dc, dc, why)
            return
        del self._pending[dc]
        self.van.bulk_connect(self.servers[dc], address, b"", pending[1],
                              msg.meta["max_frame"], SEND_HWM)
        log.info("%s: chunks to %s go sealed on the bulk channel (epoch %d, %s)", self.dc, dc,
                 epoch, address)

    def _bad_address(self, dc: str, address: str) -> str:
        """Why ``address`` is not where ``dc``'s server may take bulk frames ('' if it is):
        ``tcp://host:port`` on the host the node table gives that server."""
        try:
            parts = urlsplit(address)
            port = parts.port
        except ValueError as exc:
            return f"{address!r}: {exc}"
        expected = urlsplit(self.po.table[self.servers[dc]].address).hostname
        if parts.scheme != "tcp" or not port or parts.path or parts.hostname != expected:
            return f"{address!r} is not tcp://{expected}:PORT"
        return ""

    def moved(self, dc: str) -> None:
        """``dc``'s server was replaced: its links' keys are void; send it a new one."""
        if not self.on:
            return
        self.van.bulk_drop(self.servers[dc])
        self.van.bulk.forget(dc)
        self.admit()
        self.start([dc])
