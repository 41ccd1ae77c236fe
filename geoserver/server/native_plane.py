"""The compiled data plane, seen from the server (docs/dataplane.md).

:mod:`netstorm.geoserver._dataplane` (C++, ``geoserver/native/``) owns the server's ROUTER
receive loop, recognises the common valid chunk message (a whole dense CHUNK_UP/CHUNK_DOWN
from another DC's server, with that DC's key), sums along the trees and runs the send queues
towards the other servers, without the GIL. Everything else comes back here as events, and
the Python path handles it exactly as before:

* ``msg``: any other message, as raw frames: :meth:`~netstorm.geoserver.core.van.Van.accept_raw`
  validates it, the postoffice admits it, the server handles it;
* ``delivered``: a chunk's total, for :meth:`KeyStore.deliver`;
* ``arrival``: a chunk message's size and time, for the link monitor;
* ``route``: a chunk for a neighbour that is relayed (multipath) or stalled (detour), which the
  WAN transport cuts and relays as before;
* ``note``: a dropped or held chunk, logged here (rate-limited per neighbour, same texts).

Two facades give the rest of the server the interfaces it knows: :class:`NativeExchange` stands
for :class:`~netstorm.geoserver.server.aggregation.TreeExchange` (which stays the
specification) and :class:`NativeSendQueue` for
:class:`~netstorm.geoserver.server.wan.send_queue.SendQueue`.
"""
from __future__ import annotations

import logging

from ..core import kinds, wire
from ..core.ratelog import RateLimitedLog
from ..core.wire import Kind
from ..policy.chunking import ChunkId

__all__ = ["NativeExchange", "NativePlane", "NativeSendQueue", "choose", "core_module"]

log = logging.getLogger(__name__)
_exchange_log = logging.getLogger("netstorm.geoserver.server.aggregation")

MAX_ARRIVALS = 256      # chunk messages the core handles before the link monitor hears them


def core_module():
    """The compiled module, or ``(None, why not)``."""
    try:
        from .. import _dataplane
    except ImportError as exc:
        return None, f"the compiled data plane is not built ({exc})"
    why = _dataplane.zmq_unavailable()
    return (None, why) if why else (_dataplane, "")


def choose(settings) -> tuple:
    """``(module or None, why)``: the compiled path when ``settings.dataplane`` allows it
    and it applies (dense chunks: compression is done in Python); ``why`` says why not.
    A cluster that asks for ``native`` where it cannot run gets a clear error instead."""
    if settings.dataplane == "python":
        return None, "[transport] dataplane = \"python\""
    module, why = core_module()
    if module is not None and settings.compression.on:
        module, why = None, "compression is on (compressed chunks take the Python path)"
    if module is None and settings.dataplane == "native":
        raise RuntimeError(f"[transport] dataplane = \"native\" cannot run: {why}")
    return module, why


def _priority(priority: tuple) -> list:
    return [float(p) for p in priority]


class NativeSendQueue:
    """:class:`~netstorm.geoserver.server.wan.send_queue.SendQueue`'s interface over the
    core's queues (peers are server node ids; the core knows DCs by index)."""

    def __init__(self, plane: "NativePlane", van):
        self.plane = plane
        self.core = plane.core
        self.van = van
        self.fused = 0
        self._attached: set = set()

    def _dc(self, peer) -> int:
        if peer not in self._attached and not self.plane.socket_free and \
                self.van.is_connected(peer):      # (this server's own node is not)
            self.core.set_socket(self.plane.index_of_node[peer], self.van.socket_handle(peer))
            self._attached.add(peer)
        return self.plane.index_of_node[peer]

    def reconnected(self, peer) -> None:
        """``peer``'s DEALER was made anew (its server moved)."""
        self._attached.discard(peer)
        self._dc(peer)

    def send(self, peer, msg: wire.Message, priority: tuple = ()) -> None:
        msg.sender = getattr(self.van, "node_id", msg.sender)
        frames = wire.encode(msg)
        wire.check_sizes(msg.kind, frames, kinds.META_LIMITS[msg.kind], self.plane.max_frame)
        self.core.send(self._dc(peer), _priority(priority), frames)
        self.plane.dispatch()

    def flush(self, peer) -> None:
        self.core.flush(self._dc(peer))

    def paused(self) -> None:
        self.core.paused()

    def backlogged(self) -> list:
        return [self.plane.node_of_index[i] for i in self.core.backlogged()]

    def stalled(self, allowed_s) -> list:
        now = self.plane.clock()
        return [peer for peer in self.backlogged()
                if now - self.core.progress(self._dc(peer))
                >= allowed_s(peer, self.core.last_bytes(self._dc(peer)))]

    @staticmethod
    def _message(frames) -> wire.Message:
        return wire.decode(frames)

    def take(self, peer) -> tuple:
        handed, waiting = self.core.take(self._dc(peer))
        return [self._message(f) for f in handed], [self._message(f) for _, f in waiting]

    def release_before(self, rnd: int) -> int:
        return self.core.release_before(min(int(rnd), (1 << 64) - 1))

    def retained(self, peer=None) -> int:
        if peer is not None:
            return self.core.retained(self._dc(peer))
        return sum(self.core.retained(i) for i in self.plane.node_of_index)

    def take_waiting(self, peer, select) -> list:
        dc = self._dc(peer)
        taken, kept = [], []
        for priority, frames in self.core.take_waiting(dc):
            msg = self._message(frames)
            (taken if select(msg) else kept).append((priority, frames))
        for priority, frames in kept:       # back in place: not tried, no progress changed
            self.core.requeue(dc, list(priority), frames)
        return [self._message(f) for _, f in taken]

    def waiting(self, peer=None) -> int:
        return self.core.waiting(-1 if peer is None else self._dc(peer))

    def last_timed(self, peer) -> float:
        return self.core.last_timed(self._dc(peer))


class _Buffers:
    """What the shutdown log reads of a buffer pool."""

    def __init__(self, core):
        self._core = core

    @property
    def reused(self) -> int:
        return self._core.counters["reused"]

    @property
    def made(self) -> int:
        return self._core.counters["made"]


class NativeExchange:
    """:class:`~netstorm.geoserver.server.aggregation.TreeExchange`'s interface over the
    core's aggregation (dense chunks only)."""

    def __init__(self, plane: "NativePlane", policies):
        self.plane = plane
        self.core = plane.core
        self.policies = policies
        self.buffers = _Buffers(self.core)
        self._known: set = set()
        self.sync_policies()

    @property
    def sent(self) -> dict:
        counters = self.core.counters
        return {"chunks": counters["sent_chunks"], "encoded": 0, "bytes": counters["sent_bytes"]}

    @property
    def in_flight(self) -> int:
        return self.core.in_flight

    @property
    def waiting(self) -> int:
        return self.core.waiting_chunks

    @property
    def held(self) -> dict:
        return {self.plane.names[i]: n for i, n in self.core.held.items()}

    @property
    def own_round(self) -> int:
        return self.core.own_round

    def sync_policies(self) -> None:
        """Tell the core the trees of every policy version the book holds, and forget the
        ones it dropped. O(new versions × trees × DCs)."""
        index, dc = self.plane.index, self.plane.dc
        known = set(self.policies.by_version)
        for version in self._known - known:
            self.core.forget_version(version)
        for version in sorted(known - self._known):
            trees = self.policies[version].trees
            for i, tree in enumerate(trees):
                parent = tree.parent.get(dc)
                down = tree.down_parent.get(dc)
                self.core.add_tree(version, i, len(trees),
                                   -1 if parent is None else index[parent],
                                   [index[c] for c in tree.children(dc)],
                                   -1 if down is None else index[down],
                                   [index[c] for c in tree.down_children(dc)],
                                   index[tree.root])
        self._known = known

    def _check_versions(self, version: int) -> None:
        """A version the book holds but the core was not told of yet (added without
        :meth:`policy_added`, as TreeExchange reads the book live)."""
        if version not in self._known and version in self.policies:
            self.sync_policies()

    def contribute(self, cid: ChunkId, array, where=None) -> None:
        self._check_versions(cid.version)
        self.core.contribute(cid.key, cid.chunk, cid.rnd, cid.version, cid.tree,
                             wire.dtype_code(array.dtype), array)
        self.plane.dispatch()

    def on_chunk(self, source: str, kind: Kind, cid: ChunkId, array,
                 encoded: bool = False) -> None:
        """A whole chunk that took the Python path (in a BATCH, reassembled from parts)."""
        if encoded:
            self.plane.drops.log(source, "%s: dropped a compressed %s of key %d from %s: "
                                 "compression is off here", self.plane.dc, kind.name,
                                 cid.key, source)
            return
        self._check_versions(cid.version)
        self.core.on_chunk(self.plane.index[source], int(kind), cid.key, cid.chunk, cid.rnd,
                           cid.version, cid.tree, wire.dtype_code(array.dtype), array)
        self.plane.dispatch()

    def policy_added(self) -> None:
        self.sync_policies()
        self.core.policy_added()
        self.plane.dispatch()

    def restart(self, floor: int) -> None:
        self.sync_policies()
        self.core.restart(floor)

    def forget_after(self, rounds: dict) -> None:
        self.core.forget_after({int(k): int(r) for k, r in rounds.items()})


class NativePlane:
    """The core of one DC server and the dispatch of its events."""

    def __init__(self, module, dc: str, dcs: list, servers: dict, postoffice, settings,
                 clock, rounds_ahead: int, held_bytes: int, min_split_bytes: int,
                 retain_bytes: int, max_frame: int):
        from ..core import security
        self.dc = dc
        self.names = list(dcs)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.index_of_node = {node: self.index[name] for name, node in servers.items()}
        self.node_of_index = {i: node for node, i in self.index_of_node.items()}
        self.clock = clock
        self.max_frame = max_frame
        self.po = postoffice
        van = postoffice.van
        principals = {security.user_id(name).decode(): self.index[name] for name in self.names}
        if hasattr(van, "handles"):
            handles, extra = van.handles(), {}
        else:       # socket-free (tests): the core hands messages to the fake Van
            handles = {"router": 0, "wake_fd": -1, "delays": {}}
            extra = {"transmit": self._transmit_to(van), "clock": clock}
        self.core = module.DataPlane(
            router=handles["router"], wake_fd=handles["wake_fd"], own=self.index[dc],
            node_id=getattr(van, "node_id", 0), names=self.names,
            servers={node: self.index[name] for name, node in servers.items() if name != dc},
            principals=principals, curve=getattr(van, "credentials", None) is not None,
            max_chunk_bytes=settings.chunk_bytes, rounds_ahead=rounds_ahead,
            held_bytes=held_bytes, delays={str(k): float(v) for k, v in
                                           handles["delays"].items()},
            min_split_bytes=min_split_bytes, retain_bytes=retain_bytes, **extra)
        bulk = getattr(van, "bulk", None)
        if bulk is not None:        # the bulk channel's frames are the core's to open
            self.core.set_bulk_router(bulk.socket.underlying)
            bulk.on_change = self._opener_changed
            van.on_bulk_change = self._sealer_changed
        self.drops = RateLimitedLog(_exchange_log)
        self._holds = RateLimitedLog(_exchange_log, level=logging.INFO)
        self._dispatching = False
        self.stopped = False
        self.returned = clock()     # when the core last handed over
        self.handle = None          # msg -> False to stop (the server's)
        self.deliver = None         # (key, chunk, rnd, total)
        self.arrival = None         # (source, bytes, queued, t, behind)
        self.route = None           # (dc, kind, cid, array)

    def _opener_changed(self, dc: str, opener, node: int) -> None:
        self.core.set_opener(self.index[dc], opener, node)

    def _sealer_changed(self, peer) -> None:
        link = self.po.van.bulk_link(peer)
        if link is None:
            self.core.set_bulk(self.index_of_node[peer], 0, None, 0)
        else:
            self.core.set_bulk(self.index_of_node[peer], *link)

    def _transmit_to(self, van):
        """Socket-free: hand what the core sends to ``van.try_send`` as a Message."""
        def transmit(index, frames) -> bool:
            msg = wire.decode(frames)
            sent = van.try_send(self.node_of_index[index], msg)
            return sent
        return transmit

    @property
    def socket_free(self) -> bool:
        return not hasattr(self.po.van, "handles")

    def run(self, timeout_s: float) -> bool:
        """Let the core work for up to ``timeout_s``, then handle what it hands back;
        False once the server should stop."""
        self.core.run(timeout_s, MAX_ARRIVALS)
        self.returned = self.clock()       # from here the sockets wait for Python
        self.dispatch()
        self.po.van.poll_heap()
        return not self.stopped

    def dispatch(self) -> None:
        """Handle the core's events in order (re-entered calls leave them to the outer
        one)."""
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while not self.stopped:
                events = self.core.take_events()
                if not events:
                    break
                for event in events:
                    self._event(event)
                    if self.stopped:
                        break
        finally:
            self._dispatching = False

    def _event(self, event) -> None:
        what = event[0]
        if what == "arrival":
            _, dc, nbytes, queued, t, behind = event
            self.arrival(self.names[dc], nbytes, queued, t, behind)
        elif what == "delivered":
            _, key, chunk, rnd, _, _, total = event
            self.deliver(key, chunk, rnd, total)
        elif what == "msg":
            _, frames, user_id, peer = event
            for msg in self.po.van.accept_raw(frames, user_id, peer):
                if self.po.admit(msg) and self.handle(msg) is False:
                    self.stopped = True
                    return
        elif what == "route":
            _, dc, kind, key, chunk, rnd, version, tree, array = event
            self.route(self.names[dc], Kind(kind), ChunkId(key, chunk, rnd, version, tree),
                       array)
        else:
            _, source, level, text = event
            name = self.names[source] if source >= 0 else None
            if level == 0:
                self.drops.log(name, "%s", text)
            elif level == 1:
                self._holds.log(name, "%s", text)
            elif level == 2:
                _exchange_log.warning("%s", text)

