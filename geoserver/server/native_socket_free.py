"""The compiled data plane without sockets, behind the constructors of the Python path's
:class:`~netstorm.geoserver.server.aggregation.TreeExchange` and
:class:`~netstorm.geoserver.server.wan.send_queue.SendQueue`: the data-path tests run both
implementations with the same assertions (docs/dataplane.md). The core hands what it sends
to a Python callable instead of a socket, with the GIL held; no loop runs."""
from __future__ import annotations

from ..core import wire
from ..core.wire import Kind
from ..policy.chunking import ChunkId
from .native_plane import NativeExchange, NativePlane, NativeSendQueue, core_module

__all__ = ["socket_free_exchange", "socket_free_send_queue"]



class _Transmitting:
    """A socket-free plane's Van: what the core sends goes to ``send(dc, kind, cid, array,
    encoded)``, as :class:`TreeExchange`'s ``send`` callback would get it."""

    def __init__(self, send, dc_of_node: dict):
        self._send, self._dc_of = send, dc_of_node

    def try_send(self, node, msg: wire.Message) -> bool:
        self._send(self._dc_of[node], msg.kind, ChunkId(msg.key, msg.chunk, msg.seq, msg.policy,
                                                        msg.tree), msg.arrays()[0], False)
        return True


class _Post:
    def __init__(self, van):
        self.van = van


class _Settings:
    def __init__(self, chunk_bytes: int):
        self.chunk_bytes = chunk_bytes


def socket_free_exchange(dc: str, policies, send, deliver, rounds_ahead: int = None,
                         held_bytes: int = None, codec=None, dcs=None,
                         max_chunk_bytes: int = 1 << 30) -> NativeExchange:
    """The compiled aggregation behind :class:`TreeExchange`'s constructor and callbacks,
    with no socket (the data-path tests run both implementations with the same
    assertions). ``dcs``: every DC (default: those of the policies known now)."""
    from ..config.settings import MAX_HELD_BYTES_PER_PEER, MAX_ROUNDS_AHEAD
    if codec is not None:
        raise ValueError("the compiled aggregation carries dense chunks only")
    module, why = core_module()
    if module is None:
        raise RuntimeError(why)
    names = sorted(set(dcs or ()) | {dc} | {d for p in policies.by_version.values()
                                            for t in p.trees for d in t.parent})
    servers = {name: 100 + i for i, name in enumerate(names)}
    van = _Transmitting(send, {node: name for name, node in servers.items()})
    plane = NativePlane(module, dc, names, servers, _Post(van), _Settings(max_chunk_bytes),
                        lambda: 0.0,
                        MAX_ROUNDS_AHEAD if rounds_ahead is None else rounds_ahead,
                        MAX_HELD_BYTES_PER_PEER if held_bytes is None else held_bytes,
                        1 << 62, 0, max_chunk_bytes)
    plane.deliver = deliver
    exchange = NativeExchange(plane, policies)
    exchange.on_up = lambda source, cid, array, encoded=False: exchange.on_chunk(
        source, Kind.CHUNK_UP, cid, array, encoded)
    exchange.on_down = lambda source, cid, array, encoded=False: exchange.on_chunk(
        source, Kind.CHUNK_DOWN, cid, array, encoded)
    return exchange


class _PeerIndex(dict):
    """Peer id -> DC index, given out as peers appear (a socket-free queue's tests name
    their peers freely)."""

    def __init__(self, node_of_index: dict):
        super().__init__()
        self._back = node_of_index

    def __missing__(self, peer):
        self[peer] = index = len(self)
        self._back[index] = peer
        return index


def socket_free_send_queue(van, clock=None, retain_bytes: int = 0, fuse_bytes: int = 0,
                           peers: int = 64) -> NativeSendQueue:
    """The compiled send queues behind :class:`SendQueue`'s constructor, handing messages
    to ``van.try_send`` (a test's fake), timed by ``clock``. They never fuse small chunks
    (``fuse_bytes`` is accepted and ignored)."""
    import time
    from ..config.settings import MAX_FRAME_BYTES
    module, why = core_module()
    if module is None:
        raise RuntimeError(why)
    names = [f"peer{i}" for i in range(peers)]
    plane = NativePlane(module, names[0], names, {}, _Post(van), _Settings(1 << 30),
                        clock or time.monotonic, 1, 1, 1 << 62, retain_bytes, MAX_FRAME_BYTES)
    plane.node_of_index = {}
    plane.index_of_node = _PeerIndex(plane.node_of_index)
    plane.core.take_events()
    return NativeSendQueue(plane, van)
