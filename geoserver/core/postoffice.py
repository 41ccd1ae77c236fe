"""Node bookkeeping (ps-lite's ``Postoffice``): who is in the cluster and how to reach them.

The scheduler hands every node the same :class:`NodeTable` at rendezvous; ids and ranks come
from there, never from arithmetic on well-known numbers.
"""
from __future__ import annotations

import logging
import os
import socket
import time

from . import roles, wire
from .nodes import SCHEDULER, NodeInfo, NodeTable
from .ratelog import RateLimitedLog
from ..config.settings import MAX_EARLY_MESSAGES, MAX_HELD_BYTES_PER_PEER, RuntimeSettings, \
    SettingsError
from .van import TransportError, Van

__all__ = ["AbortError", "AbortedByScheduler", "Postoffice", "RendezvousError"]

log = logging.getLogger(__name__)


class RendezvousError(RuntimeError):
    """Registration with the scheduler failed; the text says what was awaited."""


class AbortError(RuntimeError):
    """This node cannot go on; the text says why."""


class AbortedByScheduler(AbortError):
    """The scheduler aborted the cluster because another node died or failed."""


class Postoffice:
    """A node's view of the cluster: its Van, its id, and the node table."""

    def __init__(self, van: Van, scheduler_address: str, role: str, dc: str):
        self.van = van
        self.role = role
        self.dc = dc
        self.scheduler_address = scheduler_address
        self.table: NodeTable | None = None
        self.me: NodeInfo | None = None
        self.settings: RuntimeSettings | None = None   # from the WELCOME, validated
        self.welcome_policy = None      # the first policy as sent (None: after a measurement)
        self.rejoined = False           # a worker back in its rank, a server replacing one
        # messages that beat the WELCOME here (a peer may get its WELCOME first and send
        # at once); the node handles them as soon as it knows the table. At most
        # MAX_EARLY_MESSAGES, with at most MAX_HELD_BYTES_PER_PEER of frames in all
        self.early: list = []
        self._early_bytes = 0
        self._drops = RateLimitedLog(log)
        van.connect(SCHEDULER, scheduler_address, watch=True)

    def register(self, timeout_s: float, local_index: int = -1) -> NodeInfo:
        """Register with the scheduler and wait for the node table (WELCOME).

        The scheduler gives up after ``timeout_s`` and tells every registered node who is
        missing; a node waits twice as long so that answer, not its own timeout, ends it. A
        scheduler that refuses this node's handshake (keys of another cluster, CURVE at one
        end only) ends the wait at once, if the Van is wakeable (else at its end).
        """
        meta = {"role": self.role, "dc": self.dc, "address": self.van.address,
                "host": socket.gethostname(), "pid": os.getpid(), "local_index": local_index,
                "local_address": self.van.local_address}
        self.van.send(SCHEDULER, wire.Message(wire.Kind.REGISTER, meta=meta))
        while True:
            msg = self.van.recv(2 * timeout_s)
            refused = self.van.refusals.get(SCHEDULER)
            if refused:
                raise RendezvousError(
                    f"{self.role} in {self.dc}: the scheduler at {self.scheduler_address} "
                    f"refused the handshake ({refused}): wrong keys (another cluster's?) "
                    f"or CURVE at one end only; check [security] and the secret keys")
            if msg is None:
                raise RendezvousError(
                    f"{self.role} in {self.dc}: waited {2 * timeout_s:g}s for the scheduler at "
                    f"{self.scheduler_address} to answer registration (is it running, and "
                    f"have all other nodes registered?)")
            refusal = roles.welcome_refusal(msg)
            if refusal:
                self._drops.log(msg.origin, "%s in %s: dropped: %s", self.role, self.dc,
                                refusal)
                continue
            if msg.kind == wire.Kind.WELCOME:
                break
            if msg.kind in (wire.Kind.ABORT, wire.Kind.ERROR):
                raise RendezvousError(f"{self.role} in {self.dc}: scheduler refused "
                                      f"registration: {msg.meta.get('reason', '?')}")
            self._keep_early(msg)
        try:
            self.table = NodeTable.from_json(msg.meta["nodes"])
            self.me = self.table[int(msg.meta["you"])]
        except (KeyError, TypeError, ValueError) as exc:
            raise RendezvousError(f"{self.role} in {self.dc}: malformed node table "
                                  f"from scheduler: {exc}") from exc
        try:
            self.settings = RuntimeSettings.from_json(msg.meta.get("settings"))
        except SettingsError as exc:
            raise RendezvousError(f"{self.role} in {self.dc}: bad settings from the "
                                  f"scheduler: {exc}") from exc
        self.welcome_policy = msg.meta.get("policy")
        self.rejoined = bool(msg.meta.get("rejoined", False))
        self.van.node_id = self.me.id
        return self.me

    def reregister(self, report: dict) -> None:
        """Register again, with a new scheduler, as the node this one is (``report``:
        :func:`~.scheduler_watch.report_meta`); its WELCOME comes in the node's loop."""
        meta = {"role": self.role, "dc": self.dc, "address": self.van.address,
                "host": socket.gethostname(), "pid": os.getpid(),
                "local_index": max(self.me.local_rank, -1),
                "local_address": self.van.local_address, "report": report}
        self.van.send(SCHEDULER, wire.Message(wire.Kind.REGISTER, meta=meta))

    def _keep_early(self, msg: wire.Message) -> None:
        size = sum(len(f) for f in msg.frames)
        if len(self.early) >= MAX_EARLY_MESSAGES or \
                self._early_bytes + size > MAX_HELD_BYTES_PER_PEER:
            self._drops.log(msg.sender, "%s in %s: dropped %s from node %d that came before "
                            "the WELCOME: %d messages (%d bytes) already wait", self.role,
                            self.dc, msg.kind.name, msg.sender, len(self.early),
                            self._early_bytes)
            return
        self.early.append(msg)
        self._early_bytes += size

    def take_early(self) -> list:
        """The messages that arrived before the WELCOME and that :meth:`admit` lets in,
        oldest first (once)."""
        early, self.early, self._early_bytes = self.early, [], 0
        return [msg for msg in early if self.admit(msg)]

    def admit(self, msg: wire.Message) -> bool:
        """Whether this node takes ``msg`` from its sender (:func:`roles.refusal`: a node of
        the table, of the principal whose key sent it, allowed that kind); a refused
        message is logged, rate-limited per principal and node claimed."""
        refusal = roles.refusal(self.table, self.me, msg)
        if refusal:
            self._drops.log((msg.origin, msg.sender), "%s: dropped: %s",
                            self.me.describe(), refusal)
        return not refusal

    def connect(self, node_id: int, send_hwm: int = 0) -> None:
        """Connect to a node of the table unless already connected (see :meth:`Van.connect`)."""
        if not self.van.is_connected(node_id):
            if self.table is None or node_id not in self.table:
                raise TransportError(f"{self.van.name}: unknown node {node_id}")
            node = self.table[node_id]
            self.van.connect(node_id, self.address_of(node), send_hwm, principal=node.dc)

    def address_of(self, node: NodeInfo) -> str:
        """Where to reach ``node``: its ``ipc://`` endpoint if it belongs to this node's DC
        and runs on this host (both listening there), else its TCP address."""
        if node.local_address and self.van.local_address and node.dc == self.dc \
                and node.host == socket.gethostname():
            return node.local_address
        return node.address

    def send(self, node_id: int, msg: wire.Message) -> None:
        """Send to a node of the table, connecting on first use."""
        self.connect(node_id)
        self.van.send(node_id, msg)

    def send_scheduler(self, msg: wire.Message) -> None:
        self.van.send(SCHEDULER, msg)

    def wait(self, timeout_s: float, writable=()) -> tuple:
        """Until a message is waiting or a node in ``writable`` can take more (see
        :meth:`Van.wait`): ``(message_waiting, [nodes now writable])``."""
        return self.van.wait(timeout_s, writable)

    def recv(self, timeout_s: float | None):
        """The next valid message this node admits (:meth:`admit`), or None once
        ``timeout_s`` passed (see :meth:`Van.recv`). Only after :meth:`register`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            msg = self.van.recv(timeout_s)
            if msg is None or self.admit(msg):
                return msg
            if deadline is not None:
                timeout_s = max(0.0, deadline - time.monotonic())
