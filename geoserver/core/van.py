"""Transport (ps-lite's ``Van``): ZeroMQ sockets of one node.

Each node binds one ROUTER socket at the address its config gives and receives everything
there; it sends to a peer through a DEALER socket connected to the peer's ROUTER. Sends are
serialized by a lock so a worker's engine threads may share one Van; only one thread receives.
Tensor frames are handed to ZeroMQ without copying: a buffer passed to :meth:`Van.send` must
not be modified afterwards.

A peer connected with a small ``send_hwm`` takes only that many messages into ZeroMQ's queue;
:meth:`Van.try_send` then reports a full queue instead of blocking, and :meth:`Van.wait` wakes the
receiving thread when such a peer can take more (:mod:`netstorm.geoserver.server.wan.send_queue`
keeps the rest in priority order).

With :class:`~netstorm.geoserver.core.security.Credentials` every socket uses CURVE: the ROUTER
admits only the cluster's keys (a :class:`~netstorm.geoserver.core.security.ZapHandler` on this
node's context) and every received message is stamped with the principal whose key sent it
(``Message.origin``); a DEALER proves this node's key and checks the peer's. Without them
(``credentials=None``, an explicit opt-out) traffic is plain and unauthenticated.

Given a ``local_dir`` (a folder; "": the system's temporary folder) the ROUTER also listens
on an ``ipc://`` endpoint in a private folder made there (mode 0700) for the nodes of its own
DC on the same host (a worker and its server): no TCP,
and no CURVE, since those bytes never leave the machine. That endpoint is bound before
CURVE is switched on (ZeroMQ applies security options to later binds only), so it is plain
while the TCP endpoint admits CURVE only; a message that came through it is accepted only
from a process of this node's own Unix user (the kernel's peer credentials) and carries
this node's own principal. See docs/security.md.

Given ``bulk`` (a DC server with CURVE on), the Van also binds a bulk ROUTER
(:class:`~netstorm.geoserver.core.bulk_channel.BulkReceiver`) and may seal whole chunks for a
peer on a plain DEALER once that link has a key (:meth:`bulk_connect`): see
:mod:`netstorm.geoserver.core.bulk_channel`. :meth:`recv` returns what it opens like any message.

Given ``delays`` (``{source address: seconds}``, an emulated WAN's only: see
:mod:`netstorm.geoserver.config.emulation`) every valid message whose TCP connection comes from such
an address is held that long (a :class:`~netstorm.geoserver.core.delay_line.DelayLine`) before
:meth:`Van.recv` returns it.
"""
from __future__ import annotations

import collections
import errno
import logging
import math
import os
import shutil
import tempfile
import threading
import time

import zmq

from . import batch, bulk_channel, kinds, security, wire
from .delay_line import DelayLine
from .heap import RELEASE_AFTER_BYTES, HeapReleaser
from .ratelog import RateLimitedLog
from ..config.settings import CURVE_FRAME_OVERHEAD, MAX_FRAME_BYTES

__all__ = ["MAX_IPC_PATH", "TransportError", "Van"]

log = logging.getLogger(__name__)


class TransportError(RuntimeError):
    """A socket could not be bound or a peer is unknown; the text names the node."""


MAX_IPC_PATH = 100      # a Unix socket's path has room for 107 bytes on Linux


def _private_dir(parent: str) -> str:
    """A new folder only this user can enter, in ``parent`` ("": the temporary folder), or
    in /tmp when a socket path there would be too long."""
    path = tempfile.mkdtemp(prefix="netstorm-", dir=parent or None)
    if len(path) + len("/node.sock") > MAX_IPC_PATH:
        os.rmdir(path)
        path = tempfile.mkdtemp(prefix="netstorm-", dir="/tmp")
    return path


class _Properties:
    """A received message's connection properties as the data plane read them (what a
    ``zmq.Frame`` answers to ``get``)."""

    def __init__(self, user_id, peer_address: str):
        self._values = {"User-Id": user_id, "Peer-Address": peer_address}

    def get(self, name: str):
        return self._values[name]


def _buffer_of(frame):
    return frame.buffer if hasattr(frame, "buffer") else memoryview(frame)


class Van:
    def __init__(self, name: str, host: str, port: int = 0,
                 max_frame_bytes: int = MAX_FRAME_BYTES,
                 credentials: security.Credentials | None = None,
                 local_dir: str | None = None, advertise: str = "", delays: dict | None = None,
                 wakeable: bool = False, bulk: bool = False, bulk_port: int = 0):
        """Bind ``host`` (TCP ``port``, 0: any free one); peers are told to reach this node
        at ``advertise`` ("": ``host``), e.g. its public address behind NAT.
        ``max_frame_bytes``: the largest frame taken (with CURVE, its box on top). ``delays``:
        emulated one-way delays by source address (see above). ``wakeable``: another thread
        may end a :meth:`recv` early (:meth:`wake`). ``bulk``: bind a bulk ROUTER (with
        CURVE only, where AEGIS-256 is available; else logged once and off), on
        ``bulk_port`` (0: any free one)."""
        self.name = name
        self.node_id = wire.NO_NODE
        self.credentials = credentials
        self._ctx = zmq.Context()
        self.zap = None if credentials is None else \
            security.ZapHandler(self._ctx, credentials, name)
        self._peers: dict = {}
        self._send_lock = threading.Lock()
        self._wake_fd = None
        self._wake_lock = threading.Lock()      # no wake-up writes into a closed descriptor
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.RCVHWM, 0)
        self._router.setsockopt(zmq.LINGER, 0)
        # per frame as it is on the wire (with CURVE, in its box): ZeroMQ drops the
        # connection of a peer sending a larger one
        self._router.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes + (
            0 if credentials is None else CURVE_FRAME_OVERHEAD))
        self._local_dir = None if local_dir is None else _private_dir(local_dir)
        self.local_address = ""
        if self._local_dir:     # before CURVE: this endpoint stays plain (see above)
            self.local_address = f"ipc://{self._local_dir}/node.sock"
            try:
                self._router.bind(self.local_address)
            except zmq.ZMQError as exc:
                self.close()
                raise TransportError(f"{name}: cannot bind {self.local_address}: "
                                     f"{exc.strerror}") from exc
        if credentials is not None:
            self._router.curve_server = True
            self._router.curve_publickey = credentials.own.public
            self._router.curve_secretkey = credentials.own.secret
        try:
            if port == 0:
                port = self._router.bind_to_random_port(f"tcp://{host}")
            else:
                self._router.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError as exc:
            self.close()
            reason = ("address already in use" if exc.errno == errno.EADDRINUSE
                      else exc.strerror)
            raise TransportError(f"{name}: cannot bind tcp://{host}:{port}: {reason}") from exc
        self.address = f"tcp://{advertise or host}:{port}"
        if self.zap is not None:    # refusals ZeroMQ makes before asking ZAP are logged too
            self.zap.watch(self._router, port)
        self.refusals: dict = {}    # peer -> why it refused this node's handshakes (watched)
        self._poller = zmq.Poller()
        self._poller.register(self._router, zmq.POLLIN)
        self._unpacked = collections.deque()    # the rest of a BATCH received (batch.py)
        self.bulk = self._bulk_receiver(host, advertise, max_frame_bytes, bulk_port) \
            if bulk else None
        self._bulk_out: dict = {}       # peer -> (plain DEALER, BulkSealer, largest frame)
        self.on_bulk_change = None      # (peer) after bulk_connect/bulk_drop: the data plane
        self._blocked: dict = {}        # peer -> the socket whose full queue refused a send
        if wakeable:
            self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._in_poller = zmq.Poller()          # recv's: the ROUTER and the wake-up
        self._in_poller.register(self._router, zmq.POLLIN)
        if self._wake_fd is not None:
            self._in_poller.register(self._wake_fd, zmq.POLLIN)
        if self.bulk is not None:
            self._poller.register(self.bulk.socket, zmq.POLLIN)
            self._in_poller.register(self.bulk.socket, zmq.POLLIN)
        self._watched: dict = {}        # DEALER socket -> peer, polled for POLLOUT
        self.connection_watch = None    # a ConnectionWatch: peers' closed connections
        self.dropped = 0
        self._bad = RateLimitedLog(log)
        self._heap = HeapReleaser()
        self._refused_large = False     # a refused message's pages wait for its frames' end
        self._delays = dict(delays or {})
        self._line = DelayLine()
        if self._delays:
            log.info("%s: emulated WAN: messages from %d other DCs are held %.0f-%.0f ms",
                     name, len(self._delays), 1e3 * min(self._delays.values()),
                     1e3 * max(self._delays.values()))

    def connect(self, peer, address: str, send_hwm: int = 0,
                principal: str = security.SCHEDULER_PRINCIPAL, watch: bool = False) -> None:
        """Open the DEALER towards ``peer`` (any hashable id) at ``address``, a node of
        ``principal`` (a DC's name, or the scheduler: with CURVE its key is checked).
        ``send_hwm``: how many messages ZeroMQ may queue towards it (0: unbounded).
        ``watch``: should the peer refuse the handshakes (keys, CURVE at one end only), say
        why in :attr:`refusals` and :meth:`wake` this Van."""
        with self._send_lock:
            if peer in self._peers:
                return
            try:
                server_key = None if self.credentials is None or address.startswith("ipc://") \
                    else self.credentials.server_key(principal)
            except security.SecurityError as exc:
                raise TransportError(f"{self.name}: cannot connect to {peer!r}: {exc}") \
                    from exc
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.SNDHWM, send_hwm)
            sock.setsockopt(zmq.LINGER, 2000)
            if server_key is not None:
                sock.curve_serverkey = server_key
                sock.curve_publickey = self.credentials.own.public
                sock.curve_secretkey = self.credentials.own.secret
                # CURVE copies every message into its box anyway: a zero-copy send would
                # only add pyzmq's garbage-collector thread (a wake-up per large frame)
                sock.copy_threshold = 1 << 30
            # one monitor per socket: the handshake's refusal, the connection's closing
            monitors = [security.refusal_handler(lambda why: self._refused(peer, why))] \
                if watch and address.startswith("tcp://") else []
            if self.connection_watch is not None:
                monitors += [h for h in [self.connection_watch.handler(peer)] if h]
            if monitors:
                security.watch_all(sock, monitors)
            sock.connect(address)
            self._peers[peer] = sock

    def _refused(self, peer, why: str) -> None:
        self.refusals[peer] = why
        self.wake()

    def disconnect(self, peer, linger_s: float = 1.0) -> None:
        """Close the DEALER towards ``peer``: what was sent to it still goes out for up to
        ``linger_s`` (in ZeroMQ's background), then its descriptor is released. For one-off
        replies to nodes that are not (or not yet) part of the cluster."""
        with self._send_lock:
            sock = self._peers.pop(peer, None)
            if sock is None:
                return
            if self.connection_watch is not None:
                self.connection_watch.forget(peer)
            if self._watched.pop(sock, None) is not None:
                self._poller.unregister(sock)
        sock.close(linger=max(0, int(linger_s * 1000)))

    def is_connected(self, peer) -> bool:
        return peer in self._peers

    def send(self, peer, msg: wire.Message) -> None:
        self._send(peer, msg, 0)

    def try_send(self, peer, msg: wire.Message) -> bool:
        """Send without blocking; False (nothing sent) while ``peer``'s queue is full (asked
        of ZeroMQ first: a refused send would cost an exception and an encoding)."""
        with self._send_lock:
            sock = self._bulk_socket(peer, msg) or self._peers.get(peer)
            if sock is not None and not sock.getsockopt(zmq.EVENTS) & zmq.POLLOUT:
                self._blocked[peer] = sock
                return False
        try:
            self._send(peer, msg, zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def _send(self, peer, msg: wire.Message, flags: int) -> None:
        msg.sender = self.node_id
        frames = wire.encode(msg)
        wire.check_sizes(msg.kind, frames, kinds.META_LIMITS[msg.kind], MAX_FRAME_BYTES)
        with self._send_lock:
            if self._bulk_out and self._bulk_send(peer, msg, frames, flags):
                self._blocked.pop(peer, None)
                return
            sock = self._peers.get(peer)
            if sock is None:
                raise TransportError(f"{self.name}: no connection to peer {peer!r}")
            sock.send_multipart(frames, flags=flags, copy=False)
            if self._blocked:
                self._blocked.pop(peer, None)

    def wait(self, timeout_s: float, writable=()) -> tuple:
        """Block until a message is waiting, a peer in ``writable`` can take more, or
        ``timeout_s`` passed: ``(message_waiting, [peers now writable])``; receive with
        ``recv(0)``. Only the receiving thread calls it."""
        wanted = {self._blocked.get(p) or self._peers[p]: p for p in writable}
        for sock in [s for s in self._watched if s not in wanted]:
            self._poller.unregister(sock)
        for sock in wanted:
            if sock not in self._watched:
                self._poller.register(sock, zmq.POLLOUT)
        self._watched = wanted
        due_in = self._line.wait_s(time.monotonic())
        if due_in is not None:
            timeout_s = min(timeout_s, due_in)
        if self._unpacked:          # the rest of a BATCH waits: look without waiting
            timeout_s = 0
        events = dict(self._poller.poll(max(0, int(math.ceil(timeout_s * 1000)))))
        ready = [wanted[s] for s in events if s in wanted]
        return self._router in events or bool(self._unpacked) or \
            (self.bulk is not None and self.bulk.socket in events) or \
            self._line.wait_s(time.monotonic()) == 0, ready

    def recv(self, timeout_s: float | None):
        """Next valid message, or None once ``timeout_s`` passed (None: wait forever).

        Polls the ROUTER alone: the peers :meth:`wait` watches for room stay registered on
        the shared poller, and one with room must not end the wait. Malformed messages and
        messages their kind's schema does not allow are logged (rate-limited, per peer) and
        dropped; they never raise. With CURVE, ``origin`` names the sender's key.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            held = self._line.pop_due(time.monotonic())
            if held is not None:
                return held
            if self._unpacked:
                return self._unpacked.popleft()
            if self.bulk is not None:
                got = self._bulk_take()
                if got is not None:
                    return got
                if self._line.wait_s(time.monotonic()) == 0:
                    continue            # a bulk message held by the emulated delay is due
            if self._router.poll(0, zmq.POLLIN) == 0:
                self._heap.poll()
                now = time.monotonic()
                remaining = None if deadline is None else deadline - now
                if remaining is not None and remaining <= 0:
                    return None
                due_in = self._line.wait_s(now)
                if due_in is not None:
                    remaining = due_in if remaining is None else min(remaining, due_in)
                wait_ms = None if remaining is None else max(1, math.ceil(remaining * 1000))
                readable, woken = self._poll_in(wait_ms)
                if not readable or self.bulk is not None:  # (the bulk ROUTER may be the one)
                    if not readable and (woken or deadline is not None
                                         and time.monotonic() >= deadline):
                        return None
                    continue
            frames = self._router.recv_multipart(copy=False)
            carried = self._accept(frames, frames[1] if len(frames) > 1 else None, True)
            frames = None       # the refused message's buffers go back to malloc first,
            self._release_refused()     # then its free pages to the system
            if carried:
                self._unpacked.extend(carried[1:])
                return carried[0]

    def accept_raw(self, frames: list, user_id, peer_address: str) -> list:
        """The valid messages in one multipart message received by someone else (the
        compiled data plane, which owns this node's ROUTER and applies the emulated delays
        itself): ``frames`` with the routing id first, the connection's ``User-Id`` (None if
        unset) and ``Peer-Address``. Validated, stamped and unpacked as :meth:`recv` does;
        ``[]`` for a malformed message (logged); the caller drops ``frames`` and then calls
        :meth:`poll_heap`, which returns a large refused message's pages. O(frames)."""
        return self._accept(frames, _Properties(user_id, peer_address), False)

    def _release_refused(self) -> None:
        """A large message was refused and its buffers are gone: return its free pages to
        the system (trimmed while they were alive, they would have stayed resident)."""
        if self._refused_large:
            self._refused_large = False
            self._heap.request()

    def _accept(self, frames: list, properties, delay: bool) -> list:
        """``frames`` (routing id first) as the messages they carry, after validation; the
        messages of an emulated WAN's link are held instead (``delay``) and ``[]`` returned.
        ``properties``: something with ``get(name)`` for the connection's properties."""
        try:
            # frames[0]: the identity ZeroMQ gave the sending DEALER's connection
            msg = kinds.validate(wire.decode(frames[1:], kinds.META_LIMITS))
            if self.credentials is not None:
                msg.origin = self._origin(properties)
            if msg.kind == wire.Kind.INIT and "shm_fd" in msg.meta:
                msg.peer_pid = self._local_pid(properties)
            carried = batch.unpack(msg) if msg.kind == wire.Kind.BATCH else [msg]
            held = self._delays.get(self._source(properties)) if delay and self._delays \
                else None
            if held:
                for one in carried:
                    self._line.hold(one, time.monotonic() + held)
                return []
            return carried
        except wire.WireError as exc:
            self.dropped += 1
            peer = bytes(_buffer_of(frames[0])).hex()
            # the text only: a handler that keeps records (pytest's, a MemoryHandler)
            # must not keep the message alive through the exception's traceback
            self._bad.log(peer, "%s: dropped malformed message from connection %s "
                          "(header claims node %s): %s", self.name, peer,
                          wire.claimed_sender(frames[1:]), str(exc))
            self._refused_large = sum(map(len, frames)) >= RELEASE_AFTER_BYTES
        return []

    def take_received(self) -> list:
        """The messages received but not yet returned by :meth:`recv` (the rest of a BATCH,
        those held by the emulated delay), oldest first, for whoever receives from now on
        (the compiled data plane). O(messages)."""
        held = []
        while True:
            msg = self._line.pop_due(float("inf"))
            if msg is None:
                break
            held.append(msg)
        unpacked, self._unpacked = list(self._unpacked), collections.deque()
        return held + unpacked

    def handles(self) -> dict:
        """What the compiled data plane needs to work on this Van's own sockets: the
        ROUTER's native handle, the wake-up descriptor (-1: none), the emulated delays by
        source address. O(1)."""
        return {"router": self._router.underlying,
                "wake_fd": -1 if self._wake_fd is None else self._wake_fd,
                "delays": dict(self._delays)}

    def socket_handle(self, peer) -> int:
        """The native handle of the DEALER towards ``peer`` (connected). O(1)."""
        with self._send_lock:
            sock = self._peers.get(peer)
        if sock is None:
            raise TransportError(f"{self.name}: no connection to peer {peer!r}")
        return sock.underlying

    def poll_heap(self) -> None:
        """Return freed memory to the system if a large refused message asked for it
        (:meth:`recv` does this while it waits); call it once the refused frames are
        dropped."""
        self._release_refused()
        self._heap.poll()

    def _poll_in(self, wait_ms) -> tuple:
        """Wait up to ``wait_ms`` (None: forever) for a message or a :meth:`wake`:
        ``(message waiting, woken)``."""
        if self._wake_fd is None and self.bulk is None:
            return bool(self._router.poll(wait_ms, zmq.POLLIN)), False
        events = dict(self._in_poller.poll(wait_ms))
        woken = self._wake_fd is not None and self._wake_fd in events
        if woken:
            os.eventfd_read(self._wake_fd)      # the count back to 0: one wake-up for all
        return self._router in events or (self.bulk is not None
                                          and self.bulk.socket in events), woken

    def wake(self) -> None:
        """Make the receiving thread's :meth:`recv` return now (None if no message waits);
        any thread, any number of times (they add up to one wake-up). Only for a Van made
        ``wakeable``."""
        with self._wake_lock:
            if self._wake_fd is not None:
                os.eventfd_write(self._wake_fd, 1)

    def pending(self) -> bool:
        """Whether a message already waits to be received. O(1)."""
        return bool(self._unpacked) or self.socket_pending()

    def socket_pending(self) -> bool:
        """Whether a message already waits that came after the last one received (this
        node is behind its senders; the rest of a BATCH does not count). O(1)."""
        return bool(self._router.getsockopt(zmq.EVENTS) & zmq.POLLIN) or \
            self._line.wait_s(time.monotonic()) == 0 or \
            (self.bulk is not None and self.bulk.pending())

    @staticmethod
    def _source(frame) -> str:
        """The address a TCP message's connection came from ("" if unknown)."""
        try:
            return str(frame.get("Peer-Address"))
        except zmq.ZMQError:
            return ""

    def _local_pid(self, frame) -> int:
        """The id of the process that sent ``frame`` over this node's ``ipc://`` endpoint
        as this node's Unix user (the kernel's peer credentials: ZeroMQ names such a peer
        "host:uid:gid:pid"); 0 for any other connection. O(1)."""
        if not self.local_address:
            return 0
        parts = self._source(frame).split(":")
        if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]) or \
                int(parts[1]) != os.getuid():
            return 0        # a TCP peer (an IPv6 address has empty or more parts)
        return int(parts[3])

    def _origin(self, frame) -> str:
        """The principal the ZAP handler named for ``frame``'s connection; for the plain
        ``ipc://`` endpoint (no ZAP: no User-Id), this node's own principal if the peer
        process runs as this node's Unix user."""
        try:
            user = frame.get("User-Id")
        except zmq.ZMQError:
            user = None
        if user is not None:
            principal = security.principal_of(user)
            if principal is None:
                self._bad_origin("a User-Id this node's ZAP handler did not set")
            return principal
        if self.local_address:
            try:        # ipc peers: "host:uid:gid:pid" (SO_PEERCRED)
                uid = int(str(frame.get("Peer-Address")).split(":")[1])
            except (zmq.ZMQError, IndexError, ValueError):
                uid = None
            if uid == os.getuid():
                return self.credentials.principal
        return self._bad_origin("no authenticated key")

    @staticmethod
    def _bad_origin(what: str):
        raise wire.WireError(f"message with {what}")

    # ------------------------------------------------------------ the bulk channel
    def _bulk_receiver(self, host: str, advertise: str, max_frame_bytes: int, port: int):
        """The bulk ROUTER, or None (logged once) where it cannot be used."""
        if self.credentials is None:
            return None         # curve = false: plain everywhere, no bulk channel
        why = bulk_channel.unavailable()
        if why:
            log.warning("%s: chunks to other servers stay on CURVE: %s", self.name, why)
            return None
        try:
            receiver = bulk_channel.BulkReceiver(self._ctx, self.name, host, advertise,
                                                 max_frame_bytes + bulk_channel.overhead()
                                                 + wire.HEADER.size, port)
        except zmq.ZMQError as exc:
            self.close()
            raise TransportError(f"{self.name}: cannot bind a bulk port on {host}"
                                 f"{f':{port}' if port else ''}: {exc.strerror}") from exc
        return receiver

    def bulk_connect(self, peer, address: str, rid: bytes, sealer, max_frame: int,
                     send_hwm: int) -> None:
        """From now on whole chunks (CHUNK_UP/CHUNK_DOWN without meta) for ``peer`` whose
        sealed frame is at most ``max_frame`` go sealed by ``sealer`` to its bulk ROUTER at
        ``address`` (a plain DEALER with routing id ``rid``); a link's earlier DEALER and
        key are dropped."""
        self.bulk_drop(peer)
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.SNDHWM, send_hwm)
        sock.setsockopt(zmq.LINGER, 2000)
        if rid:
            sock.setsockopt(zmq.ROUTING_ID, rid)
        sock.connect(address)
        with self._send_lock:
            self._bulk_out[peer] = (sock, sealer, max_frame)
        if self.on_bulk_change is not None:
            self.on_bulk_change(peer)

    def bulk_drop(self, peer) -> None:
        """Chunks for ``peer`` go on CURVE again; its bulk DEALER is closed, its key
        zeroed."""
        with self._send_lock:
            out = self._bulk_out.pop(peer, None)
            if out is None:
                return
            sock = out[0]
            if self._blocked.get(peer) is sock:
                del self._blocked[peer]
            if self._watched.pop(sock, None) is not None:
                self._poller.unregister(sock)
        if self.on_bulk_change is not None:
            self.on_bulk_change(peer)           # before the socket and the key go
        out[1].close()
        sock.close(linger=0)

    def bulk_peers(self) -> list:
        return list(self._bulk_out)

    def bulk_link(self, peer):
        """``(DEALER handle, BulkSealer, largest frame)`` of ``peer``'s bulk link, or None."""
        out = self._bulk_out.get(peer)
        return None if out is None else (out[0].underlying, out[1], out[2])

    def _bulk_socket(self, peer, msg: wire.Message):
        """The plain DEALER ``msg`` would leave by, or None (CURVE). Under the send lock."""
        out = self._bulk_out.get(peer)
        if out is None or msg.kind not in bulk_channel.BULK_KINDS or msg.meta or \
                len(msg.frames) != 1:
            return None
        return out[0]

    def _bulk_send(self, peer, msg: wire.Message, frames: list, flags: int) -> bool:
        """Seal and send ``msg`` (encoded as ``frames``) on ``peer``'s bulk DEALER; False
        if it goes by CURVE. Under the send lock. A frame refused by a full queue
        (zmq.Again) leaves a gap in the counters, which the receiver allows."""
        sock = self._bulk_socket(peer, msg)
        if sock is None:
            return False
        _sock, sealer, max_frame = self._bulk_out[peer]
        header, meta, payload = frames
        size = len(header) + memoryview(payload).nbytes + bulk_channel.overhead()
        if len(meta) or size > max_frame:
            return False
        sock.send(sealer.seal(header, payload), flags=flags, copy=False)
        return True

    def _bulk_take(self):
        """The next opened bulk message due now (None if none); emulated delays apply as
        to any message from that address."""
        while True:
            got = self.bulk.take()
            if got is None:
                return None
            msg, frame = got
            delay = self._delays.get(self._source(frame)) if self._delays else None
            if not delay:
                return msg
            self._line.hold(msg, time.monotonic() + delay)

    def close(self) -> None:
        with self._send_lock:
            for sock in self._peers.values():
                sock.close(linger=500)
            self._peers.clear()
            bulk_out, self._bulk_out = getattr(self, "_bulk_out", {}), {}
        for sock, sealer, _max in bulk_out.values():
            sealer.close()
            sock.close(linger=500)
        if getattr(self, "bulk", None) is not None:
            self.bulk.close()
        self._router.close(linger=0)
        self._ctx.term()
        with self._wake_lock:
            if self._wake_fd is not None:
                os.close(self._wake_fd)
                self._wake_fd = None
        if self._local_dir is not None:
            shutil.rmtree(self._local_dir, ignore_errors=True)
