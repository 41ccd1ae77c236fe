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
from .connection_watch import ConnectionWatch, closed_grace, closed_verdict
from .nodes import SCHEDULER, NodeInfo, NodeTable, SilenceJudge
from .ratelog import RateLimitedLog
from ..config.settings import MAX_EARLY_MESSAGES, MAX_HELD_BYTES_PER_PEER, RuntimeSettings, \
    SettingsError
from .van import TransportError, Van

__all__ = ["AbortError", "AbortedByScheduler", "Postoffice", "RendezvousError",
           "SCHEDULER_FLOOR_FACTOR"]

log = logging.getLogger(__name__)

SCHEDULER_FLOOR_FACTOR = 3.0    # the scheduler's silence deadline has this many times the
                                # floor: its one loop also plans policies, which may hold it


class RendezvousError(RuntimeError):
    """Registration with the scheduler failed; the text says what was awaited.
    ``caused_by_other``: the cluster stopped for another node's failure (the scheduler's
    ABORT, or the scheduler itself gone), not for this node's own."""

    def __init__(self, text: str, caused_by_other: bool = False):
        super().__init__(text)
        self.caused_by_other = caused_by_other


class AbortError(RuntimeError):
    """This node cannot go on; the text says why."""


class AbortedByScheduler(AbortError):
    """The scheduler aborted the cluster because another node died or failed; or, with
    ``left``, stopped this node because its DC left the run (elastic: it was silent, and
    the others went on without it)."""

    def __init__(self, text: str, left: bool = False):
        super().__init__(text)
        self.left = left


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
        # the scheduler's liveness (docs/recovery-detection.md): its connection, when it was
        # last heard, its silence deadline (once the settings came), the round trip it
        # measured and the last beat's clock, echoed on this node's next beat
        self.connections = ConnectionWatch(getattr(van, "wake", lambda: None),
                                           wants=lambda peer: peer == SCHEDULER)
        van.connection_watch = self.connections
        self.scheduler_seen = time.monotonic()
        self._scheduler_silence: SilenceJudge | None = None
        self.scheduler_rtt = 0.0
        self._scheduler_beat = None     # (its clock "t", when it arrived here)
        van.connect(SCHEDULER, scheduler_address, watch=True)

    def register(self, timeout_s: float, local_index: int = -1) -> NodeInfo:
        """Register with the scheduler and wait for the node table (WELCOME).

        The scheduler gives up after ``timeout_s`` and tells every registered node who is
        missing; a node waits twice as long so that answer, not its own timeout, ends it. A
        scheduler that refuses this node's handshake (keys of another cluster, CURVE at one
        end only) ends the wait at once, and so does a scheduler whose connection closed
        (it stopped: a :class:`RendezvousError` with ``caused_by_other``), if the Van is
        wakeable (else at its end).
        """
        meta = {"role": self.role, "dc": self.dc, "address": self.van.address,
                "host": socket.gethostname(), "pid": os.getpid(), "local_index": local_index,
                "local_address": self.van.local_address}
        self.van.send(SCHEDULER, wire.Message(wire.Kind.REGISTER, meta=meta))
        deadline = time.monotonic() + 2 * timeout_s
        while True:
            now = time.monotonic()
            wait = deadline - now
            closed = self.connections.closed(now)
            if SCHEDULER in closed:     # woken by the close: look again once it is a verdict
                wait = min(wait, closed_grace(0.0) - closed[SCHEDULER] + 0.01)
            msg = self.van.recv(max(0.0, wait))
            refused = self.van.refusals.get(SCHEDULER)
            if refused:
                raise RendezvousError(
                    f"{self.role} in {self.dc}: the scheduler at {self.scheduler_address} "
                    f"refused the handshake ({refused}): wrong keys (another cluster's?) "
                    f"or CURVE at one end only; check [security] and the secret keys")
            if msg is None and closed_verdict(
                    self.connections.closed_for(SCHEDULER, time.monotonic()), 0.0, False):
                raise RendezvousError(
                    f"{self.role} in {self.dc}: the scheduler at {self.scheduler_address} "
                    f"closed its connection before answering registration: it stopped (its "
                    f"own line says why)", caused_by_other=True)
            if msg is None and time.monotonic() < deadline:
                continue
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
                if msg.kind == wire.Kind.ERROR:     # this node's registration refused
                    raise RendezvousError(f"{self.role} in {self.dc}: scheduler refused "
                                          f"registration: {msg.meta.get('reason', '?')}")
                raise RendezvousError(f"{self.role} in {self.dc}: the scheduler stopped the "
                                      f"cluster before this node's registration was answered: "
                                      f"{msg.meta.get('reason', '?')}", caused_by_other=True)
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
        self.judge_scheduler()
        return self.me

    def reregister(self, report: dict) -> None:
        """Register again, with a new scheduler, as the node this one is (``report``:
        :func:`~.scheduler_watch.report_meta`); its WELCOME comes in the node's loop."""
        meta = {"role": self.role, "dc": self.dc, "address": self.van.address,
                "host": socket.gethostname(), "pid": os.getpid(),
                "local_index": max(self.me.local_rank, -1),
                "local_address": self.van.local_address, "report": report}
        self.van.send(SCHEDULER, wire.Message(wire.Kind.REGISTER, meta=meta))

    def judge_scheduler(self) -> None:
        """From now on (the WELCOME came: the settings are known) the scheduler's silence
        is judged (:meth:`scheduler_verdict`)."""
        self.scheduler_seen = time.monotonic()
        self._scheduler_silence = SilenceJudge(
            self.settings.dead_after_s, self.settings.heartbeat_s,
            SCHEDULER_FLOOR_FACTOR * self.settings.detect_floor_s)

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
        elif self.table[msg.sender].role == SCHEDULER:
            self._heard_scheduler(msg)
        return not refusal

    def _heard_scheduler(self, msg: wire.Message) -> None:
        """Something of the scheduler arrived (admitted: its key): it is alive; its beats'
        gaps teach its deadline, and each carries its clock (echoed on this node's next
        beat) and the round trip it measured."""
        now = self.scheduler_seen = time.monotonic()
        if msg.kind == wire.Kind.HEARTBEAT and self._scheduler_silence is not None:
            self._scheduler_silence.heard(SCHEDULER, now)
        if msg.kind == wire.Kind.HEARTBEAT and "t" in msg.meta:
            self._scheduler_beat = (float(msg.meta["t"]), now)
            self.scheduler_rtt = float(msg.meta.get("rtt", 0.0))
            if self._scheduler_silence is not None:
                self._scheduler_silence.detector.note_rtt(SCHEDULER, self.scheduler_rtt)

    def scheduler_verdict(self, now: float) -> str:
        """Why the scheduler is presumed dead at ``now`` ("" if it is not): its connection
        closed and stayed closed past the grace (its process ended), or it has been silent
        past its deadline (learnt from its beats; ``dead_after_s`` at most). A message
        waiting to be read is read first. O(1)."""
        why = self._judge_scheduler(now)
        if why:     # timed, on the clock every process shares (scripts/detection_time.py)
            log.warning("verdict at %.3f: %s", time.monotonic(), why)
        return why

    def _judge_scheduler(self, now: float) -> str:
        if self._scheduler_silence is None:
            return ""
        waiting = self.van.pending()
        closed_s = self.connections.closed_for(SCHEDULER, now)
        where = f"the scheduler at {self.scheduler_address}"
        if closed_s and self.settings.detect_floor_s > 0 and \
                closed_verdict(closed_s, self.scheduler_rtt, waiting):
            return (f"{where} closed its connection {closed_s:.2f}s ago and did not "
                    f"reconnect: its process ended; it is presumed dead")
        silent = now - self.scheduler_seen
        learnt = self._scheduler_silence.deadline(SCHEDULER)
        # a verdict with no scheduler restart stops this node for good: silence alone (a
        # loaded machine, a long pause) gets the configured bound; past the learnt
        # deadline the scheduler is only suspected, and said so once
        deadline = learnt if self.settings.scheduler_restarts else self.settings.dead_after_s
        if self._scheduler_silence.suspect(SCHEDULER, self.scheduler_seen, now, deadline):
            log.warning("suspected at %.3f: %s sent nothing for %.1fs (its deadline %.2fs, "
                        "learnt from its heartbeats); presumed dead once silent for "
                        "dead_after_s=%g (no scheduler_restarts)", time.monotonic(), where,
                        silent, learnt, self.settings.dead_after_s)
        if not self._scheduler_silence.dead(SCHEDULER, silent, now, waiting, deadline):
            return ""
        learnt = "" if deadline >= self.settings.dead_after_s else \
            f"its deadline {deadline:.2f}s, learnt from its heartbeats; "
        return (f"{where} sent nothing for {silent:.1f}s ({learnt}dead_after_s="
                f"{self.settings.dead_after_s:g}); it is presumed dead")

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
        """A heartbeat echoes the scheduler's last beat: its clock and how long it was
        held here (the scheduler's round trip)."""
        if msg.kind == wire.Kind.HEARTBEAT and self._scheduler_beat is not None:
            t, arrived = self._scheduler_beat
            msg.meta["echo"] = [t, max(0.0, time.monotonic() - arrived)]
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
