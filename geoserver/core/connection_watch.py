"""Which peers' connections closed: a process that dies is noticed at once.

When a process ends (killed, crashed) the kernel closes its sockets, and the TCP (or
``ipc://``) connection another node's DEALER holds towards it ends: ZeroMQ's socket monitor
says ``EVENT_DISCONNECTED`` (on an emulated or real WAN, a one-way delay later). A process
that is merely stopped (SIGSTOP) or cut off keeps its connections; that one is found by its
silence (:mod:`netstorm.geoserver.core.failure_detector`).

:class:`ConnectionWatch` follows the DEALERs a :class:`~netstorm.geoserver.core.van.Van`
opens towards the peers it ``wants``: one monitor thread per socket (blocked on its monitor
socket, ended when the socket closes; shared with the handshake's refusal watch, since ZeroMQ
allows one monitor per socket), each event recorded under a lock and the Van woken.
A connection counts as closed only once it had been up (its handshake succeeded): a peer
not listening yet is not dead. ZeroMQ reconnects by itself, so a closed connection that comes
back (a live process whose connection broke) clears it. The loop reads :meth:`closed_for`:
it decides, after a grace a few round trips long, whether the peer is dead
(:func:`closed_verdict`). A socket replaced (:meth:`watch` again, a new process at the
peer's id) or dropped (:meth:`forget`) makes its older events stale: they are ignored.
"""
from __future__ import annotations

import threading
import time

import zmq

from .security import watch_all

__all__ = ["CLOSED_GRACE_S", "ConnectionWatch", "closed_grace", "closed_verdict"]

CLOSED_GRACE_S = 0.25       # the least time a connection stays closed before its peer is dead
RTT_GRACE = 2.0             # ... and at least this many round trips: what the peer sent
                            # before it closed (its BYE) is still on the way


def closed_grace(rtt_s: float) -> float:
    """How long a closed connection must stay closed before its peer is presumed dead: a
    live peer's connection that broke comes back within ZeroMQ's reconnect interval
    (0.1 s), and what a peer sent before it ended arrives within a round trip. Pure."""
    return max(CLOSED_GRACE_S, RTT_GRACE * max(0.0, rtt_s))


def closed_verdict(closed_s: float, rtt_s: float, waiting: bool) -> bool:
    """Whether a peer whose connection has been closed for ``closed_s`` is presumed dead:
    past :func:`closed_grace`, and nothing waits to be read (it may be the peer's last
    words). Pure."""
    return closed_s >= closed_grace(rtt_s) and not waiting


class ConnectionWatch:
    """The peers whose connection is closed now, since when. ``wake``: called (from a
    monitor thread) when one closes; ``wants(peer)``: which peers to watch. Thread-safe."""

    def __init__(self, wake=lambda: None, wants=lambda peer: True, clock=time.monotonic):
        self._wake, self._wants, self._clock = wake, wants, clock
        self._lock = threading.Lock()
        self._generation: dict = {}     # peer -> the current socket's number
        self._up: set = set()           # peers whose current connection is up
        self._closed: dict = {}         # peer -> when its connection closed (after being up)
        self._count = 0

    def watch(self, sock: zmq.Socket, peer) -> None:
        """Follow ``sock`` (a DEALER not connected yet) towards ``peer``, if wanted."""
        handler = self.handler(peer)
        if handler is not None:
            watch_all(sock, [handler])

    def handler(self, peer):
        """``(events, handle)`` for the one monitor of a new socket towards ``peer``
        (:func:`~netstorm.geoserver.core.security.watch_all`), or None if ``peer`` is not
        wanted; an earlier socket towards ``peer`` is forgotten."""
        if not self._wants(peer):
            return None
        with self._lock:
            self._count += 1
            generation = self._generation[peer] = self._count
            self._up.discard(peer)
            self._closed.pop(peer, None)
        return (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED,
                lambda event, _value, _endpoint: self._event(peer, generation, event))

    def forget(self, peer) -> None:
        """``peer``'s socket was closed by this node: its events no longer count."""
        with self._lock:
            self._generation.pop(peer, None)
            self._up.discard(peer)
            self._closed.pop(peer, None)

    def _event(self, peer, generation: int, event: int) -> bool:
        """One monitor event (a monitor thread); True ends a stale socket's watch."""
        with self._lock:
            if self._generation.get(peer) != generation:
                return True
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._up.add(peer)
                self._closed.pop(peer, None)
                return False
            if peer not in self._up:            # a failed handshake, not a closed link
                return False
            self._up.discard(peer)
            self._closed[peer] = self._clock()
        self._wake()
        return False

    def closed_for(self, peer, now: float) -> float:
        """How long ``peer``'s connection has been closed (0: up, or never up). O(1)."""
        with self._lock:
            since = self._closed.get(peer)
        return 0.0 if since is None else max(0.0, now - since)

    def closed(self, now: float) -> dict:
        """``{peer: seconds closed}`` of every closed connection. O(closed)."""
        with self._lock:
            return {peer: max(0.0, now - since) for peer, since in self._closed.items()}
