"""Transport (ps-lite's ``Van``): ZeroMQ sockets of one node.

Each node binds one ROUTER socket at the address its config gives and receives everything
there; it sends to a peer through a DEALER socket connected to the peer's ROUTER. Sends are
serialized by a lock so a worker's engine threads may share one Van; only one thread receives.
Tensor frames are handed to ZeroMQ without copying: a buffer passed to :meth:`Van.send` must
not be modified afterwards.
"""
from __future__ import annotations

import errno
import logging
import threading
import time

import zmq

from . import wire

log = logging.getLogger(__name__)


class TransportError(RuntimeError):
    """A socket could not be bound or a peer is unknown; the text names the node."""


class Van:
    def __init__(self, name: str, host: str, port: int = 0):
        self.name = name
        self.node_id = wire.NO_NODE
        self._ctx = zmq.Context()
        self._peers: dict = {}
        self._send_lock = threading.Lock()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.RCVHWM, 0)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.setsockopt(zmq.MAXMSGSIZE, -1)
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
        self.address = f"tcp://{host}:{port}"
        self._poller = zmq.Poller()
        self._poller.register(self._router, zmq.POLLIN)
        self.dropped = 0

    def connect(self, peer, address: str) -> None:
        """Open the DEALER towards ``peer`` (any hashable id) at ``address``."""
        with self._send_lock:
            if peer in self._peers:
                return
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.LINGER, 2000)
            sock.connect(address)
            self._peers[peer] = sock

    def is_connected(self, peer) -> bool:
        return peer in self._peers

    def send(self, peer, msg: wire.Message) -> None:
        msg.sender = self.node_id
        frames = wire.encode(msg)
        with self._send_lock:
            sock = self._peers.get(peer)
            if sock is None:
                raise TransportError(f"{self.name}: no connection to peer {peer!r}")
            sock.send_multipart(frames, copy=False)

    def recv(self, timeout_s: float | None):
        """Next valid message, or None once ``timeout_s`` passed (None: wait forever).

        Malformed messages are logged and dropped; they never raise.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._router.poll(0, zmq.POLLIN) == 0:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                wait_ms = None if remaining is None else max(1, int(remaining * 1000))
                if not self._poller.poll(wait_ms):
                    if deadline is not None and time.monotonic() >= deadline:
                        return None
                    continue
            frames = self._router.recv_multipart(copy=False)
            try:
                return wire.decode(frames[1:])  # frames[0]: the sending DEALER's identity
            except wire.WireError as exc:
                self.dropped += 1
                log.warning("%s: dropped malformed message: %s", self.name, exc)

    def close(self) -> None:
        with self._send_lock:
            for sock in self._peers.values():
                sock.close(linger=500)
            self._peers.clear()
        self._router.close(linger=0)
        self._ctx.term()
