"""Which nodes are alive, lost (awaited back) or finished, for the scheduler's loop
(:class:`~netstorm.scheduler.service.Scheduler`): its heartbeats to every node, a node
presumed dead (:meth:`Liveness.check`: at once when its connection closes, its process
gone; when it stops answering, after a silence deadline learnt from its heartbeats and round
trip, ``dead_after_s`` at most: docs/recovery-detection.md), a new process superseding one still
taken for alive, a worker's stop note (BYE), which the workers still running hear of, and
stalls: a worker silent on the data path while others wait on it or have finished
(:mod:`netstorm.scheduler.stalls`), warned of and, past ``max_idle_s``, fatal.

A node lost while restarts are left is awaited (:class:`~netstorm.scheduler.rejoin.LostNodes`,
pure); otherwise, or when it does not come back within ``timeout_s``, the run aborts
(:class:`ClusterAborted`, naming the node and what was awaited). Every check is O(nodes).
"""
from __future__ import annotations

import logging
import time

from netstorm.geoserver.core import wire
from netstorm.geoserver.core.connection_watch import ConnectionWatch, closed_grace, \
    closed_verdict
from netstorm.geoserver.core.nodes import SCHEDULER, SERVER, SilenceJudge

from .rejoin import LostNodes
from .stalls import StallWatch

__all__ = ["ClusterAborted", "Liveness"]

log = logging.getLogger("netstorm.scheduler")


class ClusterAborted(RuntimeError):
    """The run cannot continue; the text names the node and what was awaited."""


class Liveness:
    """The nodes' liveness; ``table`` is set once the rendezvous assigned them.
    ``check_stop``: called once a beat; raises to stop the scheduler (a signal)."""

    def __init__(self, config, van, check_stop, on_stall=None):
        self.config, self.van, self._check_stop = config, van, check_stop
        self._on_stall = on_stall or (lambda text: None)     # each stall warned of
        self.table = None
        self.last_seen: dict = {}       # node id -> when it was last heard of
        self._silence = SilenceJudge(config.dead_after_s, config.heartbeat_s,
                                     config.detect_floor_s)
        # the nodes' connections, closed when their process ends (the Van's DEALERs)
        self.connections = ConnectionWatch(getattr(van, "wake", lambda: None),
                                           wants=lambda peer: isinstance(peer, int))
        van.connection_watch = self.connections
        self.finished: set = set()      # workers that said BYE
        self._silent: set = set()       # lost for their silence alone (they may revive)
        self.departures: dict = {}      # esync: worker id -> the WORKER_LEFT meta servers got
        self.lost = LostNodes(config.worker_restarts, config.timeout_s, config.server_restarts)
        self.step_s: dict = {}          # esync: dc -> its slowest seconds per local step
        self.next_beat = 0.0            # every node hears from the scheduler
        self.stalls: StallWatch | None = None   # the workers' data path, once they beat
        self._warn_at: dict = {}        # node id -> the silence at which to warn again
        self._next_judgement = 0.0      # stalls are judged once a beat
        # elastic: depart(node id, why) -> True when the node's DC left the run instead
        # of the run aborting (scheduler/departing.py); leaves_for_now(node id) -> whether
        # its DC would leave and could come back ([elastic] rejoins): a silent node's DC
        # then leaves at the node's learnt deadline rather than stall the others
        self.depart = lambda node_id, why: False
        self.leaves_for_now = lambda node_id: False

    def heard(self, node_id: int, meta: dict) -> None:
        """A worker's heartbeat: its data path (:meth:`StallWatch.heard`)."""
        if self.table is None:
            return
        if self.stalls is None:
            self.stalls = StallWatch(self.table.workers(),
                                     min(self.config.dead_after_s, self.config.timeout_s / 2),
                                     self.config.max_idle_s)
        self.stalls.heard(node_id, meta, time.monotonic())

    def seen(self, node_id: int) -> None:
        self.last_seen[node_id] = time.monotonic()

    def heartbeat(self, node_id: int, meta: dict) -> None:
        """A node's heartbeat: its gap since the last one teaches its deadline (any message
        says it is alive, but beats are what keep coming when it has nothing else to say);
        it echoes the scheduler's last one (``echo``: its ``t`` and how long the node held
        it): the round trip, which bounds the deadline below. An echo from the future, or
        longer than ``dead_after_s``, is ignored."""
        now = time.monotonic()
        self._silence.heard(node_id, now)
        echo = meta.get("echo")
        if echo is None:
            return
        rtt = now - float(echo[0]) - float(echo[1])
        if 0.0 <= rtt <= self.config.dead_after_s:
            self._silence.detector.note_rtt(node_id, rtt)

    def due_at(self) -> float:
        """When :meth:`check` may next give a verdict (a closed connection's grace ends, a
        node's silence reaches its deadline, or its learnt one to say it is suspected): the
        loop wakes by then. O(nodes)."""
        due, now = float("inf"), time.monotonic()
        for node_id, closed_s in self._closed(now).items():
            if node_id in self.last_seen and node_id not in self.finished:
                due = min(due, now - closed_s + closed_grace(
                    self._silence.detector.rtt(node_id)))
        for node_id, seen in self.last_seen.items():
            if node_id not in self.finished:
                learnt = seen + self._silence.deadline(node_id)
                due = min(due, learnt if learnt > now else seen + self.deadline(node_id))
        return due

    def deadline(self, node_id: int) -> float:
        """The silence after which ``node_id`` is presumed dead now: the deadline learnt
        from its heartbeats while a verdict can be undone (it has a restart left: it is
        awaited, and taken back if it speaks again), else ``dead_after_s``. Silence is not
        death: a node that is only slow to beat (a loaded machine, a long pause of its
        interpreter) must not abort the run, or make its DC leave for good, before the
        configured bound. O(1)."""
        node = self.table[node_id] if self.table is not None and node_id in self.table \
            else None
        if node is None or self.lost.remaining(node_id, node.role) <= 0 and \
                not self.leaves_for_now(node_id):
            return self.config.dead_after_s
        return self._silence.deadline(node_id)

    def _slowest_elsewhere(self, dc: str) -> dict:
        """esync: a server hears the slowest seconds per local step of the *other* DCs;
        its own DC's it measures itself, fresher than the figure it reported a beat ago
        (a stale one made the slowest worker take two steps in a round). O(DCs)."""
        others = [s for d, s in self.step_s.items() if d != dc]
        return {"step_s": max(others)} if others else {}

    def beat(self) -> None:
        """Every ``heartbeat_s``, a HEARTBEAT to every node still running: a node that hears
        nothing from the scheduler for ``dead_after_s`` stops, naming it."""
        now = time.monotonic()
        if now < self.next_beat:
            return
        self._check_stop()
        self.next_beat = now + self.config.heartbeat_s
        rtt = self._silence.detector.rtt      # t: echoed back, to measure round trips
        # a waiting worker hears who has not pushed its rounds (scheduler/stalls.py)
        verdicts = self.stalls.verdicts(self.finished) if self.stalls is not None else {}
        for node in self.table.nodes.values():
            if node.role != SCHEDULER and node.id not in self.finished and \
                    node.id not in self.lost and self.van.is_connected(node.id):
                self.van.send(node.id, wire.Message(
                    wire.Kind.HEARTBEAT, meta={**(self._slowest_elsewhere(node.dc)
                                                  if node.role == SERVER else
                                                  verdicts.get(node.id, {})),
                                               "t": now, "rtt": rtt(node.id)}))

    def check(self, replacement, waiting: bool = False) -> None:
        """Raise :class:`ClusterAborted` for a silent node that cannot be awaited, a lost one
        overdue, or ``replacement`` (a lost DC server being replaced, or None) overdue.
        ``waiting``: a message waits to be read (it may be a silent node's beat, queued while
        the loop was busy: :class:`~netstorm.geoserver.core.nodes.SilenceJudge`)."""
        now = time.monotonic()
        for node_id, closed_s in self._closed(now).items():
            if node_id in self.last_seen and node_id not in self.finished and \
                    closed_verdict(closed_s, self._silence.detector.rtt(node_id), waiting):
                self._presume_dead(node_id, f"closed its connection {closed_s:.2f}s ago and "
                                            f"did not reconnect: its process ended; it is "
                                            f"presumed dead", replacement)
        for node_id, seen in list(self.last_seen.items()):
            if node_id in self.finished:
                continue
            deadline = self.deadline(node_id)
            if self._silence.suspect(node_id, seen, now, deadline):   # judged at the bound
                log.warning("suspected at %.3f: %s sent nothing for %.1fs (its deadline "
                            "%.2fs, learnt from its heartbeats); presumed dead once silent "
                            "for dead_after_s=%g (no restart left to wait for it)",
                            time.monotonic(), self.table.describe(node_id), now - seen,
                            self._silence.deadline(node_id), self.config.dead_after_s)
            if self._silence.dead(node_id, now - seen, now, waiting, deadline):
                learnt = "" if deadline >= self.config.dead_after_s else \
                    f"its deadline {deadline:.2f}s, learnt from its heartbeats; "
                self._presume_dead(node_id, f"sent nothing for {now - seen:.1f}s ({learnt}"
                                            f"dead_after_s={self.config.dead_after_s:g}); it "
                                            f"is presumed dead", replacement, silent=True)
        for lost in self.lost.overdue(now):
            raise ClusterAborted(f"{lost.node.describe()} {lost.why}, and did not rejoin "
                                 f"within timeout_s = {self.config.timeout_s:g}s")
        why = replacement.overdue(now) if replacement is not None else ""
        if why:
            raise ClusterAborted(f"replacing the server of {replacement.lost_dc}: {why} "
                                 f"within timeout_s = {self.config.timeout_s:g}s")
        if self.stalls is not None and replacement is None and not self.lost.lost and \
                now >= self._next_judgement:
            self._next_judgement = now + self.config.heartbeat_s
            self.judge_stalls(now)

    def _closed(self, now: float) -> dict:
        """The nodes' closed connections, acted on unless ``detect_floor_s = 0`` (the old
        rule: silence for ``dead_after_s`` only)."""
        return self.connections.closed(now) if self.config.detect_floor_s > 0 else {}

    def _presume_dead(self, node_id: int, why: str, replacement, silent=False) -> None:
        """The verdict on ``node_id``: awaited back, or :class:`ClusterAborted` naming it.
        ``silent``: for its silence alone (it may speak again: :meth:`revive`)."""
        self._log_verdict(node_id, why)
        # stopped or cut off, not gone: its DC leaves for now, the others go on, and it
        # rejoins when it speaks again (waiting for it would stall every DC meanwhile)
        if silent and self.leaves_for_now(node_id) and self.depart(node_id, why):
            return
        if self.lose(node_id, why, replacement is not None):
            if silent:
                self._silent.add(node_id)
            return
        if not self.depart(node_id, why):               # elastic: its DC leaves the run
            raise ClusterAborted(f"{self.table.describe(node_id)} {why}")

    def revive(self, node_id: int) -> bool:
        """A message from a lost node: True if it is taken back. Only a node presumed dead
        for its silence alone (stopped, or cut off by its link: its connections never
        closed) and whose place nothing took yet (no new process registered in it): it
        was paused, not lost, and holds all its state; its restart is given back. A
        message from a node whose process ended cannot come (its queue was read before
        the verdict). O(1)."""
        if node_id not in self._silent or node_id not in self.lost:
            return False
        self._silent.discard(node_id)
        lost = self.lost.revive(node_id)
        self.last_seen[node_id] = time.monotonic()
        log.warning("%s spoke again %.1fs after it was presumed dead: taken back (it was "
                    "silent, not gone)", lost.node.describe(),
                    time.monotonic() - (lost.deadline - self.config.timeout_s))
        return True

    def _log_verdict(self, node_id: int, why: str) -> None:
        """Every verdict is logged once, timed (scripts/detection_time.py reads it)."""
        log.warning("verdict at %.3f: %s %s", time.monotonic(), self.table.describe(node_id),
                    why)

    def judge_stalls(self, now: float) -> None:
        """Warn of every stall (again each time its silence doubled); raise
        :class:`ClusterAborted` naming a worker silent for ``max_idle_s``. Not while a
        lost node is awaited (the others wait for its return, not on a hang). O(workers x
        waits)."""
        stalls = self.stalls.stalls(now, self.finished)
        for node in set(self._warn_at) - {s.node for s in stalls}:
            del self._warn_at[node]            # it sent something: a new stall warns anew
        for stall in stalls:
            if stall.quiet_s >= self._warn_at.get(stall.node, 0.0):
                self._warn_at[stall.node] = 2 * stall.quiet_s
                log.warning("%s", stall.describe())
                self._on_stall(stall.describe())
            if self.config.max_idle_s and stall.quiet_s >= self.config.max_idle_s:
                raise ClusterAborted(
                    f"{self.table.describe(stall.node)} sent nothing on the data path for "
                    f"{stall.quiet_s:.1f}s while {stall.others()} (max_idle_s = "
                    f"{self.config.max_idle_s:g}): it is presumed hung")

    def lose(self, node_id: int, why: str, replacing: bool) -> bool:
        """Await a dead worker's or server's return (``[recovery] worker_restarts``,
        ``server_restarts``); False if the cluster must abort instead. Several servers
        may be lost at once, also during a replacement (scheduler/replacing.py)."""
        node = self.table[node_id]
        if not self.lost.lose(node, time.monotonic(), why):
            return False
        self.last_seen.pop(node_id, None)
        self._silence.forget(node_id)
        log.warning("%s %s; waiting up to %gs for it to rejoin (%d restart(s) left)",
                    node.describe(), why, self.config.timeout_s,
                    self.lost.remaining(node_id, node.role))
        return True

    def supersede(self, meta: dict, replacing: bool) -> None:
        """A new process registering in the place of a worker (its rank) or a server (its
        DC) still taken for alive: its launcher restarted it before the silence gave it
        away (only a holder of that DC's key can register there)."""
        role, dc = meta.get("role"), meta.get("dc")
        for node in self.table.nodes.values():
            if node.role != role or node.dc != dc or node.id in self.lost or \
                    node.id in self.finished:
                continue
            if role == SERVER:
                self.lose(node.id, "was replaced by a new process", replacing)
            elif node.local_rank == meta.get("local_index"):
                self.lose(node.id, "was replaced by a new process in its rank", replacing)

    def bye(self, msg: wire.Message, replacing: bool, esync: bool) -> None:
        """A worker's stop note: finished (the workers still running, and under ``esync``
        the servers, hear of it), or failed (awaited back, else :class:`ClusterAborted`)."""
        node = self.table[msg.sender]
        if not msg.meta.get("clean", True):
            why = f"failed: {msg.meta.get('reason', 'no reason given')}"
            if self.lose(msg.sender, why, replacing) or self.depart(msg.sender, why):
                return
            raise ClusterAborted(f"{node.describe()} {why}")
        self.finished.add(msg.sender)
        pushes = msg.meta.get("pushes", [])
        others = [n for n in self.table.workers() if n.id not in self.finished]
        log.info("%s finished after round %d%s", node.describe(),
                 max((n for _, n in pushes), default=0),
                 f"; telling the {len(others)} still running" if others else "")
        meta = {"rank": node.rank, "pushes": pushes, "who": node.describe()}
        for other in others:    # a later round needs it: they fail at once, not on timeout
            self.van.send(other.id, wire.Message(wire.Kind.WORKER_LEFT, meta=meta))
        if esync:                                   # the others go on without it
            self.departures[msg.sender] = meta      # a replaced server hears it again
            for dc in self.table.dcs:
                self.van.send(self.table.server_of(dc).id,
                              wire.Message(wire.Kind.WORKER_LEFT, meta=meta))
