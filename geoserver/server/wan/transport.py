"""One DC server's WAN side below aggregation: how chunks leave and arrive.

Leaving: a chunk for neighbour v goes whole, or in parts over relays (multipath), or around v's
stalled link (detour), as :class:`~netstorm.geoserver.server.wan.routing.Router` says; every message
passes the priority :class:`~netstorm.geoserver.server.wan.send_queue.SendQueue`. Arriving: every
chunk message feeds the passive :class:`~netstorm.geoserver.server.wan.link_monitor.LinkMonitor` of
the link it came over; a ``RELAY`` for another DC is forwarded; parts are reassembled; every whole
chunk goes, with the DC it came from and whether it is a compressed payload (the ENCODED flag), to
the ``deliver`` callback (:meth:`WanTransport.deliver_to`; the server wires it to
:meth:`~netstorm.geoserver.server.aggregation.TreeExchange.on_chunk`).

Part and relay messages keep the chunk's header fields and add JSON meta: ``part``
``[start, total]`` (elements), ``from`` (origin DC), and for RELAY ``to``, ``kind`` (the
chunk's CHUNK_UP/CHUNK_DOWN) and ``hops``. Whole direct chunks carry no meta.
"""
from __future__ import annotations

import logging

import numpy as np

from ...core import wire
from ...policy.chunking import ChunkId
from .link_monitor import LinkMonitor
from ...core.ratelog import RateLimitedLog
from .reassembly import PartError, Reassembler
from .routing import MAX_HOPS, Router
from .send_queue import SEND_HWM, SendQueue
from ...core.wire import Kind, Message

__all__ = ["AWAY_S", "CHUNK_KINDS", "PROBE_BURST", "PROBE_BURST_S", "PROBE_PIECE_BYTES",
           "RETAIN_BYTES", "STALL_FRACTION", "WanTransport", "probe_pieces"]

log = logging.getLogger(__name__)

CHUNK_KINDS = (Kind.CHUNK_UP, Kind.CHUNK_DOWN)
RETAIN_BYTES = 64 << 20     # chunk bytes per peer kept, until acknowledged, for detours
PROBE_BURST = (8, 32)   # pieces of PROBE_PIECE_BYTES in one idle-link probe: at least,
PROBE_BURST_S = 0.25    # and at most; in between, this long at the link's known rate
PROBE_PIECE_BYTES = 64 * 1024
STALL_FRACTION = 0.05   # a link slower than this part of its known rate may count as failed
AWAY_S = 0.05           # a server busy this long between two looks at its sockets may have
                        # let a link drain: ZeroMQ holds SEND_HWM + 1 messages, 0.1 s of 1 MiB
                        # chunks at 155 Mbit/s


def probe_pieces(known_mbps: float) -> int:
    """Pieces in one probe burst: about :data:`PROBE_BURST_S` of traffic at the link's known
    rate, within :data:`PROBE_BURST`. The receiver times the burst with its own clock; a
    burst much shorter than the moments its server spends on other messages would be timed
    too short (the pieces wait and are read back to back)."""
    pieces = round(PROBE_BURST_S * max(0.0, known_mbps) * 1e6 / 8 / PROBE_PIECE_BYTES)
    return int(min(PROBE_BURST[1], max(PROBE_BURST[0], pieces)))


class WanTransport:
    def __init__(self, dc: str, servers: dict, postoffice, rates: dict, chunk_bytes: int,
                 stall_s: float, clock, fuse_bytes: int = 0, outbox=None):
        """``servers``: DC -> server node id; ``rates``: (a, b) -> Mbit/s of known links;
        ``fuse_bytes``: waiting chunks smaller than this leave together (a BATCH);
        ``outbox``: the send queues to use instead of a :class:`SendQueue` of the Van's (the
        compiled data plane's, :mod:`netstorm.geoserver.server.native_plane`)."""
        self.dc = dc
        self.servers = servers
        self.dc_of = {node: name for name, node in servers.items()}
        self.clock = clock
        self.stall_s = stall_s
        self.outbox = outbox or SendQueue(postoffice.van, clock, retain_bytes=RETAIN_BYTES,
                                          fuse_bytes=fuse_bytes)
        # another message already waits on the socket (the rest of a BATCH came with this
        # one: it does not make the receiver late)
        self._behind = postoffice.van.socket_pending
        self.router = Router(dc, rates)
        self.monitor = LinkMonitor(known={a: mbps for (a, b), mbps in rates.items()
                                          if b == dc})
        # a chunk is at most chunk_bytes (>= 1 element); parts claim at most that many
        self.reassembly = Reassembler(max_elements=max(1, chunk_bytes))
        self._probed: dict = {}          # neighbour -> when its link was last probed
        self._deliver = None     # (origin, kind, cid, array, encoded) of every whole chunk
        self._probe_piece = np.zeros(PROBE_PIECE_BYTES, dtype=np.uint8)
        self._drops = RateLimitedLog(log)
        # a link with no way around it stays stalled for a while: said once in a while
        self._stuck = RateLimitedLog(log, lines=1, level=logging.ERROR)
        for name, node in servers.items():
            if name != dc:
                postoffice.connect(node, send_hwm=SEND_HWM)
                if hasattr(self.outbox, "reconnected"):     # the compiled queues: its socket
                    self.outbox.reconnected(node)

    def deliver_to(self, deliver) -> None:
        """Hand every whole chunk that arrives to ``deliver(origin, kind, cid, array,
        encoded)``
        (set before messages arrive)."""
        self._deliver = deliver

    # ------------------------------------------------------------ leaving
    def backlogged(self) -> list:
        """Server nodes with messages waiting here: watch them for room."""
        return self.outbox.backlogged()

    def flush(self, nodes, away_s: float = 0.0) -> None:
        """``nodes`` can take more: hand each its most urgent waiting messages. ``away_s``:
        how long the server was busy elsewhere before it looked; from :data:`AWAY_S` on, a
        backlogged link may have drained meanwhile (:meth:`SendQueue.paused`)."""
        if away_s >= AWAY_S:
            self.outbox.paused()
        for node in nodes:
            self.outbox.flush(node)

    def send(self, dc: str, msg: Message, priority: tuple = ()) -> None:
        self.outbox.send(self.servers[dc], msg, priority)

    def send_chunk(self, dc: str, kind: Kind, cid: ChunkId, array, encoded=False) -> None:
        """A chunk for neighbour ``dc``: dense, or a compressed payload (``encoded``: its
        bytes are split and relayed like any array, and marked ENCODED)."""
        priority = (cid.rnd, cid.key, cid.chunk)
        flags = wire.Flag.ENCODED if encoded else wire.Flag.NONE
        parts = self.router.parts(dc, len(array), array.itemsize, self.clock())
        if len(parts) == 1 and parts[0][0] is None:
            self.send(dc, self._chunk(kind, cid, array, flags=flags), priority)
            return
        for via, start, stop in parts:
            self._send_part(via or dc, dc, kind, cid, array[start:stop], [start, len(array)],
                            self.dc, hops=1, flags=flags)

    def _send_part(self, nxt: str, to: str, kind: Kind, cid: ChunkId, array, part: list,
                   origin: str, hops: int, flags=wire.Flag.NONE) -> None:
        """One part of a chunk from ``origin`` for ``to``: straight to it when ``nxt`` is
        ``to``, else as a RELAY through ``nxt`` (its ``hops``-th relay)."""
        meta = {"part": part, "from": origin}
        if nxt != to:
            meta.update(to=to, kind=int(kind), hops=hops)
            kind = Kind.RELAY
        self.send(nxt, self._chunk(kind, cid, array, meta, flags),
                  (cid.rnd, cid.key, cid.chunk))

    @staticmethod
    def _cid(msg: Message) -> ChunkId:
        """The chunk a chunk, part or relay message carries (the inverse of :meth:`_chunk`)."""
        return ChunkId(msg.key, msg.chunk, msg.seq, msg.policy, msg.tree)

    @staticmethod
    def _encoded(msg: Message) -> bool:
        """Whether a chunk, part or relay message carries a compressed payload."""
        return bool(msg.flags & wire.Flag.ENCODED)

    @staticmethod
    def _chunk(kind, cid: ChunkId, array, meta=None, flags=wire.Flag.NONE) -> Message:
        return Message(kind, key=cid.key, chunk=cid.chunk, seq=cid.rnd, policy=cid.version,
                       tree=cid.tree, dtype=array.dtype, meta=meta or {}, frames=[array],
                       flags=flags & wire.Flag.ENCODED)

    # ------------------------------------------------------------ arriving
    def on_message(self, source: str, msg: Message) -> None:
        """A chunk, part or relay message from neighbour ``source``: delivered once a whole
        chunk is here, else forwarded or kept until its other parts arrive. Malformed
        messages are logged and dropped."""
        if len(msg.frames) != 1 or msg.dtype is None:
            self._drops.log(source, "%s: dropped %s of key %d from %s: %d frames, dtype %s",
                            self.dc, msg.kind.name, msg.key, source, len(msg.frames), msg.dtype)
            return
        self._time_arrival(source, msg, self.clock())
        (array,) = msg.arrays()
        cid = self._cid(msg)
        encoded = self._encoded(msg)
        if msg.kind == Kind.RELAY:
            self._on_relay(source, msg, cid, array, encoded)
        elif "part" not in msg.meta:
            self._deliver(source, msg.kind, cid, array, encoded)
        else:
            self._on_part(msg.kind, cid, msg.meta, array, encoded)

    def on_probe(self, source: str, msg: Message, now: float) -> None:
        """A probe piece from neighbour ``source`` arrived at ``now``: the link's passive
        estimate times it like any chunk."""
        self._time_arrival(source, msg, now)

    def note_arrival(self, source: str, msg: Message) -> None:
        """Any other message from neighbour ``source`` (a key's initial value, a replica)
        took the link too: the passive estimate counts it, so the interval it took is not
        read as the next chunk's. O(1)."""
        self._time_arrival(source, msg, self.clock())

    def _time_arrival(self, source: str, msg: Message, now: float) -> None:
        self.monitor.on_arrival(source, wire.wire_size(msg),
                                bool(msg.flags & wire.Flag.QUEUED), now, self._behind())

    def _check_meta(self, meta: dict, relay: bool):
        part, origin = meta.get("part"), meta.get("from")
        if not (isinstance(part, list) and len(part) == 2 and all(isinstance(x, int)
                                                                   for x in part)):
            raise PartError(f"bad part {part!r}")
        if origin not in self.servers:
            raise PartError(f"unknown origin DC {origin!r}")
        if relay:
            if meta.get("to") not in self.servers or meta.get("kind") not in \
                    [int(k) for k in CHUNK_KINDS] or not isinstance(meta.get("hops"), int):
                raise PartError(f"bad relay header {meta!r}")
        return part, origin

    def _on_part(self, kind, cid: ChunkId, meta: dict, array, encoded: bool) -> None:
        try:
            (start, total), origin = self._check_meta(meta, relay=False)
            whole = self.reassembly.add((kind, cid, origin, encoded), start, total, array,
                                        peer=origin)
        except PartError as exc:
            self._drops.log(meta.get("from"), "%s: dropped part of key %d chunk %d: %s",
                            self.dc, cid.key, cid.chunk, exc)
            return
        if whole is not None:
            self._deliver(origin, kind, cid, whole, encoded)

    def _on_relay(self, source: str, msg: Message, cid: ChunkId, array,
                  encoded: bool) -> None:
        try:
            self._check_meta(msg.meta, relay=True)
        except PartError as exc:
            self._drops.log(source, "%s: dropped RELAY of key %d from %s: %s", self.dc, cid.key,
                            source, exc)
            return
        meta, to, kind = dict(msg.meta), msg.meta["to"], Kind(msg.meta["kind"])
        if to == self.dc:
            self._on_part(kind, cid, meta, array, encoded)
            return
        nxt = self.router.next_hop(to, self.clock(), came_from=(source, meta["from"]))
        if meta["hops"] >= MAX_HOPS:
            self._drops.log(source, "%s: dropped part of key %d chunk %d for %s after %d "
                            "relays", self.dc, cid.key, cid.chunk, to, meta["hops"])
            return
        if nxt is None:                 # no way around: wait for the direct link
            log.warning("%s: no detour to %s for key %d chunk %d; it waits for the link",
                        self.dc, to, cid.key, cid.chunk)
            nxt = to
        self._send_part(nxt, to, kind, cid, array, meta["part"], meta["from"], meta["hops"] + 1,
                        msg.flags)

    # ------------------------------------------------------------ stalls and the scheduler
    def acknowledged(self, rnd: int) -> None:
        """Every key applied the rounds before ``rnd`` here, so every chunk message of
        them reached its peer (a round's total needs all of its chunks, and a DC
        contributes to a round only once it has the total of the one before): they are no
        longer kept for detours. O(messages retained)."""
        self.outbox.release_before(rnd)

    def check_stalls(self) -> None:
        """Detour the chunks of every neighbour whose link moved nothing for ``stall_s``:
        those waiting and every chunk handed over and not yet acknowledged (it may be
        stuck in buffers)."""
        now = self.clock()
        for node in self.outbox.stalled(self._allowed_s):
            dc = self.dc_of[node]
            via = self.router.mark_stalled(dc, now)
            if via is None:
                self._stuck.log(dc, "%s: link to %s stalled and no relay reaches it; waiting",
                                self.dc, dc)
                continue
            handed, waiting = self.outbox.take(node)
            # chunks handed over may be stuck in buffers: send them again (the receiver
            # drops what arrives twice); control messages handed over are left alone
            again = [m for m in handed if m.kind in CHUNK_KINDS or m.kind == Kind.RELAY]
            log.warning("%s: link to %s stalled: %d waiting and %d unacknowledged chunk "
                        "messages go around it via %s", self.dc, dc, len(waiting), len(again),
                        via)
            for msg in again + waiting:
                self._reroute(msg, dc, now)

    def _allowed_s(self, node, last_bytes: int) -> float:
        """How long a link may go without taking a message before it counts as stalled:
        ``stall_s`` plus the time the last messages handed over (maybe all still ahead)
        need at 5% of the link's known rate, at least 1 Mbit/s. So a link counts as failed
        when it runs at well under a twentieth of what it was known for, not when it is
        merely slower or carries big messages."""
        known = self.router.rates.get((self.dc, self.dc_of[node]), 0.0)
        return self.stall_s + 8 * last_bytes / (max(1.0, STALL_FRACTION * known) * 1e6)

    def _reroute(self, msg: Message, dead: str, now: float) -> None:
        """Send a message that was bound for ``dead`` another way: a chunk or part through
        a relay, a relayed part towards its destination; control messages keep waiting."""
        if msg.kind not in CHUNK_KINDS and msg.kind != Kind.RELAY:
            if msg.kind != Kind.PROBE:
                self.send(dead, msg)
            return
        array = msg.arrays()[0]
        cid = self._cid(msg)
        meta = msg.meta
        if msg.kind == Kind.RELAY:
            to, kind, hops = meta["to"], Kind(meta["kind"]), meta["hops"]
        else:
            to, kind, hops = dead, msg.kind, 0
        nxt = self.router.next_hop(to, now, came_from=(dead,))
        if nxt is None:
            log.error("%s: no way around the stalled link to %s for key %d chunk %d; it waits",
                      self.dc, dead, cid.key, cid.chunk)
            self.send(dead, msg, (cid.rnd, cid.key, cid.chunk))
            return
        self._send_part(nxt, to, kind, cid, array, meta.get("part", [0, len(array)]),
                        meta.get("from", self.dc), hops + 1, msg.flags)

    def probe_idle(self, every_s: float) -> None:
        """Send a small burst (:func:`probe_pieces`) over every known link that has
        nothing waiting and carried nothing its receiver could time for ``every_s`` (idle,
        or only ever lightly used), so that the receiver can measure it (pieces after the
        first are marked QUEUED: they follow back to back; they queue behind any chunk).
        Also how a link given up as stalled is found to work again. O(neighbours)."""
        now = self.clock()
        for (a, v), mbps in self.router.rates.items():
            node = self.servers.get(v)
            if a != self.dc or node is None or self.outbox.waiting(node) \
                    or self.router.is_stalled(v, now):
                continue
            if now - max(self.outbox.last_timed(node), self._probed.get(v, 0.0)) < every_s:
                continue
            self._probed[v] = now
            piece = self._probe_piece
            for i in range(probe_pieces(mbps)):
                self.send(v, Message(Kind.PROBE, dtype=piece.dtype, frames=[piece],
                                     flags=wire.Flag.QUEUED if i else wire.Flag.NONE),
                          priority=(float("inf"),))      # behind any chunk

    def on_routes(self, meta: dict) -> None:
        """A new relay plan applies at once, also to whole chunks still waiting here (a
        link that slowed mid-round sheds the rest of that round's chunks too)."""
        before = dict(self.router.relays)
        self.router.set_plan(meta.get("relays"), meta.get("rates"))
        log.info("%s: relay plan %s", self.dc,
                 {v: parts for v, parts in self.router.relays.items()} or "none")
        now = self.clock()
        for v in self.router.relays:
            node = self.servers.get(v)
            if node is None or self.router.relays[v] == before.get(v) or \
                    self.router.is_stalled(v, now):
                continue
            whole = self.outbox.take_waiting(
                node, lambda m: m.kind in CHUNK_KINDS and "part" not in m.meta)
            for msg in whole:
                self.send_chunk(v, msg.kind, self._cid(msg), msg.arrays()[0],
                                self._encoded(msg))
            if whole:
                log.info("%s: %d waiting chunks for %s re-split by the new plan", self.dc,
                         len(whole), v)

    def forget_before(self, version: int) -> int:
        """A lost DC's server is being replaced: chunks of policy versions before
        ``version`` (rounds replayed under it) are no longer sent, nor reassembled; how
        many messages were dropped here. O(messages waiting)."""
        stale = 0
        self.outbox.release_before(1 << 62)     # the rounds in flight are replayed anyway
        for node in self.servers.values():
            stale += len(self.outbox.take_waiting(node, lambda m: m.policy < version and (
                m.kind in CHUNK_KINDS or m.kind == Kind.RELAY)))
        self.reassembly.drop(lambda ident: ident[1].version < version)
        return stale

    def moved(self, dc: str, node: int, postoffice) -> None:
        """``dc``'s server is now another process at another address (the table says
        where): reconnect, and try its direct link again."""
        postoffice.van.disconnect(node, linger_s=0)
        postoffice.connect(node, send_hwm=SEND_HWM)
        if hasattr(self.outbox, "reconnected"):
            self.outbox.reconnected(node)
        self.router.stalled.pop(dc, None)
        self.outbox.flush(node)

    def report(self) -> dict:
        """Heartbeat meta: inbound link estimates and the neighbours given up as stalled."""
        now = self.clock()
        meta = {}
        links = self.monitor.report(now)
        if links:
            meta["links"] = links
        stalled = sorted(v for v in list(self.router.stalled) if self.router.is_stalled(v, now))
        if stalled:
            meta["stalled"] = stalled
        return meta
