"""The bulk channel: chunks between DC servers sealed with AEGIS-256 on a plain socket.

CURVE costs more CPU per byte than the rest of a server's chunk path together. Between two
servers, CHUNK_UP/CHUNK_DOWN messages (with no meta: whole chunks) may instead travel as one
frame each, ``[counter u64 | AEGIS-256(header 38 B ‖ payload) | tag 32 B]``, sealed by the
compiled data plane (``geoserver/native/bulk_aead.cpp``) under a key the sender drew for that
link, direction and epoch and sent over CURVE (LINK_KEY, answered by LINK_KEY_DONE with the
receiver's bulk address: :mod:`netstorm.geoserver.server.wan.link_keys`). Everything else,
and every chunk until the key is acknowledged, stays on CURVE.

The receiving side, :class:`BulkReceiver`, is a second ROUTER of the server's Van: plain TCP
on its own port, a ZAP handler on its NULL mechanism admitting only the cluster's server
addresses, a finite RCVHWM and a MAXMSGSIZE of the largest sealed chunk. Each frame is
opened with the key of the link its connection names (tag checked, counter strictly above
the last one accepted, nothing decrypted or kept otherwise), then decoded and checked like
any message, and its header's sender must be the server of the DC holding that key: only
then does it take the path CURVE messages take, with that DC as its origin. A frame refused
for any reason is counted, logged (rate-limited per connection) and dropped.

docs/security.md, "Bulk chunks between servers", says what this protects and against whom.
"""
from __future__ import annotations

import logging
import socket
import struct
from urllib.parse import urlsplit

import zmq

from . import kinds, wire
from .ratelog import RateLimitedLog
from .security import BULK_DOMAIN
from .wire import Kind, Message

__all__ = ["BULK_KINDS", "BULK_RCVHWM", "BulkReceiver", "bulk_frame_bytes", "hosts_of",
           "routing_id", "unavailable"]

log = logging.getLogger(__name__)

BULK_KINDS = frozenset({Kind.CHUNK_UP, Kind.CHUNK_DOWN})
BULK_RCVHWM = 64            # messages queued per connection on the bulk ROUTER
_ROUTING_PREFIX = b"nsbulk"
_EMPTY_META = b""


def _native():
    try:
        from .. import _dataplane
    except ImportError:
        return None
    return _dataplane


def unavailable() -> str:
    """Why this process cannot seal bulk chunks ('' if it can): the compiled data plane
    is not built, pyzmq's libsodium has no AEGIS-256, or the CPU has no AES instructions."""
    native = _native()
    if native is None:
        return "the compiled data plane (netstorm.geoserver._dataplane) is not built"
    return native.bulk_unavailable()


def overhead() -> int:
    return _native().BULK_OVERHEAD


def bulk_frame_bytes(payload_bytes: int) -> int:
    """The sealed frame of a chunk with ``payload_bytes`` of payload."""
    return wire.HEADER.size + payload_bytes + overhead()


def routing_id(src_index: int) -> bytes:
    """The ZeroMQ routing id a server's bulk DEALER gives itself: which link key the
    receiver tries (a claim only; the tag proves it)."""
    return _ROUTING_PREFIX + struct.pack("<H", src_index)


def hosts_of(addresses) -> set:
    """The IP addresses ``tcp://host:port`` addresses resolve to (what a ZAP request names
    as the peer's address)."""
    hosts = set()
    for address in addresses:
        host = urlsplit(address).hostname
        if not host:
            continue
        try:
            hosts.update(info[4][0] for info in socket.getaddrinfo(host, None,
                                                                   proto=socket.IPPROTO_TCP))
        except OSError as exc:
            log.warning("bulk channel: cannot resolve %s (%s): not admitted", host, exc)
    return hosts


class BulkReceiver:
    """A server's bulk ROUTER and the openers of the links into it (see the module doc)."""

    def __init__(self, ctx: zmq.Context, name: str, host: str, advertise: str,
                 max_frame_bytes: int, port: int = 0):
        self.name = name
        self.refused = 0
        self._links: dict = {}          # DC -> (node id, BulkOpener)
        self._conns: dict = {}          # connection (ZeroMQ's routing id) -> DC whose key
                                        # opened its first frame
        self._bad = RateLimitedLog(log)
        self.on_change = None           # (dc, opener or None, node id): the data plane
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, BULK_RCVHWM)
        sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
        sock.zap_domain = BULK_DOMAIN               # NULL mechanism, but ZAP is asked
        if port:        # the cluster file's bulk_port; else any free port
            sock.bind(f"tcp://{host}:{port}")
        else:
            port = sock.bind_to_random_port(f"tcp://{host}")
        self.socket = sock
        self.max_frame = max_frame_bytes
        self.address = f"tcp://{advertise or host}:{port}"

    def limit(self, max_frame_bytes: int) -> None:
        """The largest frame taken on connections made from now on (before any link key
        is sent: the first peer connects only after its LINK_KEY_DONE)."""
        self.max_frame = max_frame_bytes
        self.socket.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)

    def expect(self, dc: str, src_index: int, node_id: int, opener) -> None:
        """From now on frames on ``dc``'s connection (routing id of ``src_index``) are
        opened with ``opener`` and must name ``node_id`` (that DC's server) as their sender;
        the link's previous key is dropped (and zeroed)."""
        old = self._links.pop(dc, None)
        if self.on_change is not None:
            self.on_change(dc, opener, node_id)
        if old is not None:
            old[1].close()
        self._links[dc] = (node_id, opener)

    def forget(self, dc: str) -> None:
        """``dc``'s key is no longer valid (its server was replaced)."""
        old = self._links.pop(dc, None)
        if self.on_change is not None:
            self.on_change(dc, None, 0)
        if old is not None:
            old[1].close()
        self._conns = {conn: who for conn, who in self._conns.items() if who != dc}

    def pending(self) -> bool:
        return bool(self.socket.getsockopt(zmq.EVENTS) & zmq.POLLIN)

    def take(self):
        """The next frame waiting, opened and checked: ``(message, its zmq.Frame)``; None
        when nothing waits. A refused frame is logged and dropped, and the next one tried."""
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return None
            msg = self._open(frames)
            if msg is not None:
                return msg, frames[-1]

    def _open(self, frames) -> Message | None:
        peer = bytes(frames[0].buffer)
        if len(frames) != 2:
            return self._refuse(peer, f"{len(frames) - 1} frames, a bulk message is one")
        native = _native()
        dc = self._conns.get(peer)
        if dc is None or dc not in self._links:
            # a connection's first frame: which link key opens it? (tried out of place;
            # a failed try changes no opener's state). Connections are few (ZAP admits
            # servers only) and this happens once per connection.
            plain = None
            for dc, (node_id, opener) in self._links.items():
                try:
                    plain = memoryview(opener.open(frames[1]))
                    break
                except native.BulkRefused:
                    continue
            if plain is None:
                return self._refuse(peer, "no link key opens it (a stranger, a wrong key "
                                    "or a forged, replayed or truncated frame)")
            if len(self._conns) >= 4 * max(1, len(self._links)):
                self._conns.clear()             # stale connections of replaced servers
            self._conns[peer] = dc
        else:
            node_id, opener = self._links[dc]
            try:
                plain = opener.open_in_place(frames[1])
            except native.BulkRefused as exc:
                return self._refuse(peer, f"on DC {dc}'s connection: {exc}")
        try:
            if len(plain) < wire.HEADER.size:
                raise wire.WireError(f"sealed message of {len(plain)} bytes has no header")
            header, payload = plain[:wire.HEADER.size], plain[wire.HEADER.size:]
            msg = kinds.validate(wire.decode([header, _EMPTY_META, payload],
                                             kinds.META_LIMITS))
            if msg.kind not in BULK_KINDS:
                raise wire.WireError(f"{msg.kind.name} on the bulk channel, which carries "
                                     f"CHUNK_UP and CHUNK_DOWN only")
            if msg.sender != node_id:
                raise wire.WireError(f"header's sender is node {msg.sender}, not node "
                                     f"{node_id}, DC {dc}'s server that holds this link key")
        except wire.WireError as exc:
            return self._refuse(peer, f"from DC {dc}'s link: {exc}")
        msg.origin = dc
        return msg

    def _refuse(self, peer: bytes, why: str) -> None:
        self.refused += 1
        self._bad.log(peer, "%s: dropped a bulk frame from connection %s: %s", self.name,
                      peer.hex(), why)
        return None

    def close(self) -> None:
        for _node, opener in self._links.values():
            opener.close()
        self._links.clear()
        self.socket.close(linger=0)
