"""Who may talk to a node: a process's credentials and the ZAP handler.

Every socket of a secure cluster uses ZeroMQ's CURVE (CurveZMQ: Curve25519 key exchange,
XSalsa20-Poly1305 on every frame). The keys themselves, their files and the cluster file's
``[security]`` table are :mod:`netstorm.geoserver.config.keys`.

A node's ROUTER is a CURVE server whose :class:`ZapHandler` admits only the listed keys and
names the peer by the key it proved it holds: the *principal*, a DC's name or
:data:`SCHEDULER_PRINCIPAL`. The transport stamps every received message with it
(``Message.origin``), so nobody can speak as another DC, whatever its header claims; which
principal may send what is :mod:`netstorm.geoserver.core.roles`'s business.

Nothing here reads the environment: processes build :class:`Credentials` at their edge
(:func:`credentials_for`) and pass them down.
"""
from __future__ import annotations

import logging
import os
import socket as pysocket
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from zmq.utils import z85

from ..config.keys import (SCHEDULER_PRINCIPAL, INSECURE_WARNING, KeyPair, SecurityConfig,
                           SecurityError, check_key, describe, key_file_name, read_key_pair)
from .ratelog import RateLimitedLog

__all__ = ["Credentials", "HANDSHAKE_TRIES", "ZAP_ENDPOINT", "ZapHandler", "credentials_for",
           "handshake_failure", "node_credentials", "principal_of", "user_id", "watch_events",
           "watch_refusal", "worker_credentials", "zap_reply"]

log = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"     # fixed by ZeroMQ's RFC 27
BULK_DOMAIN = b"netstorm-bulk"    # the ZAP domain of a server's bulk ROUTER (NULL mechanism)
BULK_USER = b"bulk"               # its User-Id: names no principal (the link key does)
_USER_DC = "dc:"
_USER_SCHEDULER = "scheduler"


@dataclass(frozen=True)
class Credentials:
    """What one process needs for CURVE: its own key pair and who is admitted, by public
    key. Also tells which key a peer's ROUTER proves (:meth:`server_key`)."""

    own: KeyPair
    principal: str
    admitted: dict = field(default_factory=dict)      # public key (Z85 bytes) -> principal

    def server_key(self, principal: str) -> bytes:
        for key, who in self.admitted.items():
            if who == principal:
                return key
        raise SecurityError(f"no public key for {describe(principal)}")


def credentials_for(security: SecurityConfig, principal: str) -> Credentials:
    """The credentials of ``principal`` (a DC name, or the scheduler) from the cluster
    file's keys and its secret key file; the file's public key must be the listed one."""
    keys = security.keys
    if principal not in keys:
        raise SecurityError(f"the cluster file lists no public key for {describe(principal)}")
    if not security.secret_keys:
        raise SecurityError("the cluster file's [security] names no secret_keys directory")
    path = Path(security.secret_keys) / key_file_name(principal)
    pair = read_key_pair(path, "[security] secret_keys")
    if pair.public != keys[principal].encode():
        raise SecurityError(f"{path} is not the key pair of {describe(principal)} that the "
                            f"cluster file lists (keys made for another cluster file?)")
    admitted = {key.encode(): who for who, key in keys.items()}
    return Credentials(pair, principal, admitted)


def user_id(principal: str) -> bytes:
    """The ZAP User-Id naming ``principal`` on received frames."""
    return (_USER_SCHEDULER if principal == SCHEDULER_PRINCIPAL
            else _USER_DC + principal).encode()


def principal_of(user: str | None) -> str | None:
    """The principal a frame's User-Id names; None for anything this handler did not set."""
    if user == _USER_SCHEDULER:
        return SCHEDULER_PRINCIPAL
    if user and user.startswith(_USER_DC):
        return user[len(_USER_DC):]
    return None


def zap_reply(request: list, admitted: dict, bulk_hosts=frozenset()) -> tuple:
    """Answer one ZAP request (RFC 27): ``(reply frames, principal or None, address)``.
    Admits CURVE clients whose key is in ``admitted``, and on the bulk ROUTER's domain
    (:data:`BULK_DOMAIN`, NULL mechanism) connections from ``bulk_hosts`` (the cluster's
    server addresses; their principal is then "" and the link key names the sender), and
    nothing else. Pure."""
    if len(request) < 6:
        request_id = request[1] if len(request) > 1 else b""
        return [b"1.0", request_id, b"400", b"malformed ZAP request", b"", b""], None, "?"
    _version, request_id, domain, address, _identity, mechanism = request[:6]
    credentials = request[6:]
    peer = address.decode("ascii", "replace")
    if domain == BULK_DOMAIN:
        if mechanism != b"NULL" or credentials:
            return [b"1.0", request_id, b"400", b"NULL expected on the bulk port", b"",
                    b""], None, peer
        if peer not in bulk_hosts:
            return [b"1.0", request_id, b"400", b"not a server of the cluster (bulk port)",
                    b"", b""], None, peer
        return [b"1.0", request_id, b"200", b"OK", BULK_USER, b""], "", peer
    if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
        return [b"1.0", request_id, b"400", b"CURVE required", b"", b""], None, peer
    principal = admitted.get(z85.encode(credentials[0]))
    if principal is None:
        return [b"1.0", request_id, b"400", b"unknown key", b"", b""], None, peer
    return [b"1.0", request_id, b"200", b"OK", user_id(principal), b""], principal, peer


def handshake_failure(event: int, value: int) -> str | None:
    """What a ZeroMQ monitor event says of a failed handshake, in words; None for any other
    event. ``value`` is ZeroMQ's protocol error code, ZAP status or errno. Pure."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"the peer refused this node's key (ZAP status {value})"
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return "no CURVE at one end (CURVE on one side only)"
        if value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
            return ("the CURVE keys do not match (a listed public key without its secret, "
                    "or keys of another cluster)")
        return f"ZMTP protocol error {value:#x}"
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        return (f"the connection ended during the handshake ({os.strerror(value)}): no "
                f"CURVE at the other end, or it expects another key")
    return None


_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
           | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


def watch_events(sock: zmq.Socket, events: int, handle) -> None:
    """Call ``handle(event, value, endpoint)`` for each of ``events`` on ``sock`` (ZeroMQ's
    socket monitor), from a thread blocked on the monitor socket, until ``handle`` returns
    True; the thread reads (and drops) the later events until ``sock`` is closed or its
    context terminated: ZeroMQ's I/O thread sends each event blocking, so a monitor no one
    reads would stall every socket of the context at the next one (a reconnection's
    handshake, e.g. to a new scheduler). Call before ``sock`` connects."""
    # a name of its own: pyzmq's default names it after the socket's file descriptor, which
    # a socket made after this one is closed may reuse while this monitor still holds the
    # name (a scheduler reconnecting to a replaced server: "Address already in use")
    monitor = sock.get_monitor_socket(events | zmq.EVENT_MONITOR_STOPPED,
                                      addr=f"inproc://netstorm-monitor-{os.urandom(8).hex()}")

    def serve():
        handled = False
        try:
            while True:
                try:
                    head, endpoint = monitor.recv_multipart()
                except zmq.ContextTerminated:
                    return
                event, value = struct.unpack("=Hi", head)
                if event == zmq.EVENT_MONITOR_STOPPED:
                    return
                if not handled:
                    handled = bool(handle(event, value, endpoint))
        finally:
            monitor.close(linger=0)
    threading.Thread(target=serve, name="netstorm-monitor", daemon=True).start()


def _peer_address(fd: int, port: int) -> str:
    """The remote address of the TCP connection ``fd`` accepted on ``port``; "" if it is
    closed already (ZeroMQ may close a refused one before this thread reads the event) or
    is no longer such a connection."""
    try:
        copy = os.dup(fd)                       # a copy: ZeroMQ's stays as it was
    except OSError:
        return ""
    try:
        conn = pysocket.socket(fileno=copy)
    except OSError:                             # the number is no socket any more
        os.close(copy)
        return ""
    with conn:
        try:
            if conn.family in (pysocket.AF_INET, pysocket.AF_INET6) and \
                    conn.getsockname()[1] == port:
                return str(conn.getpeername()[0])
        except OSError:
            pass
    return ""


HANDSHAKE_TRIES = 3     # handshakes in a row that the peer ended without a word which mean
                        # a refusal (ZeroMQ retries every 0.1 s; one may end by chance)


def watch_refusal(sock: zmq.Socket, refused) -> None:
    """Call ``refused(why)`` (from another thread) once the peer that ``sock`` connects to
    refused the handshake (:func:`refusal_handler`). Call before ``sock`` connects."""
    watch_all(sock, [refusal_handler(refused)])


def watch_all(sock: zmq.Socket, handlers) -> None:
    """:func:`watch_events` for several ``(events, handle)`` pairs on one socket (ZeroMQ
    allows one monitor per socket): each handle gets its events until it returns True; the
    watch ends once every one did."""
    live = list(handlers)
    events = 0
    for wanted, _handle in live:
        events |= wanted

    def handle(event, value, endpoint):
        for pair in list(live):
            if pair[0] & event and pair[1](event, value, endpoint):
                live.remove(pair)
        return not live
    watch_events(sock, events, handle)


def refusal_handler(refused) -> tuple:
    """``(events, handle)`` calling ``refused(why)`` once the peer refused the handshake:
    keys that are not the cluster's, or CURVE at one end only. A protocol or ZAP failure is
    final (ZeroMQ gives the connection up); a peer that closes the connection mid-handshake
    (it refused our key or our lack of CURVE) must do so :data:`HANDSHAKE_TRIES` times in a
    row. It is done at the first handshake that succeeds."""
    closed: list = []

    def handle(event, value, _endpoint):
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            return True
        closed.append(handshake_failure(event, value))
        if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and len(closed) < HANDSHAKE_TRIES:
            return False
        refused(closed[-1])
        return True
    return zmq.EVENT_HANDSHAKE_SUCCEEDED | _FAILED, handle


class ZapHandler:
    """Admits the CURVE keys of ``credentials`` on every socket of ``ctx`` (ZeroMQ asks it
    once per connection attempt, not per message). One thread, blocked on its socket; it
    ends when the context is terminated. Refusals are logged, rate-limited per address, also
    those ZeroMQ makes before asking it (:meth:`watch`)."""

    def __init__(self, ctx: zmq.Context, credentials: Credentials, name: str):
        self.name = name
        self.refused = 0
        self._admitted = dict(credentials.admitted)
        self.bulk_hosts = frozenset()       # addresses admitted on the bulk port
        self._refusals = RateLimitedLog(log)
        self._lock = threading.Lock()       # the ZAP and the monitor threads both log
        self._socket = ctx.socket(zmq.REP)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(ZAP_ENDPOINT)
        self._thread = threading.Thread(target=self._serve, name="netstorm-zap", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            while True:
                try:
                    request = self._socket.recv_multipart()
                except zmq.ContextTerminated:
                    return
                reply, principal, peer = zap_reply(request, self._admitted, self.bulk_hosts)
                if principal is None:
                    self._refuse(peer, reply[3].decode())
                self._socket.send_multipart(reply)
        finally:
            self._socket.close(linger=0)

    def allow_bulk(self, hosts) -> None:
        """Admit on the bulk port only connections from ``hosts`` (IP addresses) from now
        on (one reference swap: the ZAP thread reads it without a lock)."""
        self.bulk_hosts = frozenset(hosts)

    def _refuse(self, peer: str, why: str) -> None:
        with self._lock:
            self.refused += 1
            self._refusals.log(peer or "?", "%s: refused a connection from %s: %s (only the "
                               "keys the cluster file lists are admitted)", self.name,
                               peer or "an unknown address (closed before it was read)",
                               why)

    def watch(self, router: zmq.Socket, port: int) -> None:
        """Also log the connections to ``router``'s TCP ``port`` that ZeroMQ refuses before
        asking this handler: no CURVE, or a listed public key without its secret (the
        handshake's cryptography fails). ZeroMQ's events name no peer: its address is read
        from the connection when it is accepted, and a failure is the connection's that
        ZeroMQ closes next (one I/O thread: its events come in order)."""
        peers: dict = {}                # descriptor -> address, while connected
        failed: list = []               # why the connection about to close failed

        def handle(event, value, _endpoint):
            if event == zmq.EVENT_ACCEPTED:
                peers[value] = _peer_address(value, port)
            elif event == zmq.EVENT_DISCONNECTED:
                peer = peers.pop(value, "")
                if failed:
                    self._refuse(peer, failed.pop())
            elif event != zmq.EVENT_HANDSHAKE_FAILED_AUTH:     # ZAP's: logged by _serve
                failed[:] = [handshake_failure(event, value)]
        watch_events(router, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | _FAILED, handle)


def node_credentials(security: SecurityConfig, principal: str, source: str):
    """The credentials a server or the scheduler (``principal``) runs with, from its cluster
    file ``source``; None (and a logged warning) when the file turns CURVE off."""
    if not security.curve:
        log.warning("%s: %s", describe(principal), INSECURE_WARNING)
        return None
    if not security.keys:
        raise SecurityError(f"{source} lists no keys: make them with 'netstorm-keygen "
                            f"{source}' (or 'python scripts/keygen.py {source}'), or set "
                            f"[security] curve = false to run unencrypted and "
                            f"unauthenticated")
    return credentials_for(security, principal)


def worker_credentials(dc: str, key_file: str, scheduler_key: str) -> Credentials:
    """A worker's credentials: its DC's key pair (``key_file``), admitting its DC's server
    and the scheduler (``scheduler_key``, Z85) only."""
    pair = read_key_pair(key_file, "NETSTORM_KEY_FILE, from the cluster file's [security] "
                                   "secret_keys")
    scheduler = check_key(scheduler_key, "the scheduler's public key")
    return Credentials(pair, dc, {pair.public: dc, scheduler: SCHEDULER_PRINCIPAL})
