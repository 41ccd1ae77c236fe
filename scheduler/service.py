"""The scheduler process's loop: rendezvous, barriers, liveness, the WAN policy.

One thread, one loop: it blocks on its socket with a timeout no longer than the heartbeat
interval, so it wakes to check liveness without busy-waiting. The decisions live in pure
parts: who may register and which ids and ranks they get (:mod:`netstorm.scheduler.registration`),
which rounds servers are in, which are open and from which round a new policy applies
(:mod:`netstorm.scheduler.rounds`), what every node is told about how to run
(:class:`~netstorm.geoserver.config.settings.RuntimeSettings`, built once from the cluster file).
"""
from __future__ import annotations

import logging
import random
import time

from netstorm.geoserver.core import roles, wire
from netstorm.geoserver.core.kinds import KINDS, handlers_for
from netstorm.geoserver.config.exit_reasons import EXIT_ABORTED
from netstorm.geoserver.config.cluster import ClusterConfig
from netstorm.geoserver.core.nodes import SCHEDULER, SERVER, NodeInfo, NodeTable
from netstorm.geoserver.core.ratelog import RateLimitedLog
from netstorm.geoserver.config.settings import MAX_EARLY_MESSAGES, ProbeRequest, RuntimeSettings
from netstorm.geoserver.core.van import Van

from .awareness import Adaptation, Replanner
from .policy import NOMINAL_MODEL_BYTES, initial_policy, needs_measurement, planning_topology, \
    random_trees
from .registration import SCHEDULER_ID, Registration
from .replacement import RecoveryError, ServerReplacement
from .rejoin import LostNodes
from .rounds import RoundTracker

__all__ = ["ClusterAborted", "PROGRESS_S", "Scheduler"]

log = logging.getLogger("netstorm.scheduler")
PROGRESS_S = 10.0     # at most this long between "waiting: ..." lines while nodes register


class ClusterAborted(RuntimeError):
    """The run cannot continue; the text names the node and what was awaited."""


class Scheduler:
    def __init__(self, config: ClusterConfig, van: Van, switch_every_s: float = 0.0,
                 seed: int = 0, stats=None, check_stop=lambda: None):
        """``check_stop``: called once a beat; raises to stop the scheduler (a signal)."""
        self.config = config
        self._check_stop = check_stop
        # what servers and workers are told; the WAN's links join once they are known
        self.settings = RuntimeSettings.from_cluster(config)
        self.stats = stats or (lambda record: None)    # JSON-lines sink (``[scheduler] stats``)
        self.adaptation: Adaptation | None = None
        self.wan_topology = None        # the WAN as planned on (declared or measured)
        # test mode: announce a random policy this often, to exercise policy switches live
        self.switch_every_s = switch_every_s
        self._rng = random.Random(seed)
        self.van = van
        self.van.node_id = SCHEDULER_ID
        self.table: NodeTable | None = None
        self.last_seen: dict = {}
        self.finished: set = set()
        self.lost = LostNodes(config.worker_restarts, config.timeout_s, config.server_restarts)
        self.replacement: ServerReplacement | None = None   # a lost DC server being replaced
        self.barriers: dict = {}
        # adapt: servers start a round only once it is open, and a re-planned policy starts
        # at the first round not yet open - the very next round, with no lead and no race
        self.round_gate = self.settings.round_gate
        self.rounds = RoundTracker(self.round_gate, config.heartbeat_s)
        self._step_s: dict = {}     # esync: dc -> its slowest seconds per local step
        self._next_beat = 0.0                  # every node hears from the scheduler
        self.abort_reason = ""                 # why run() aborted the cluster
        self._drops = RateLimitedLog(log)      # about messages from strangers
        self._rejects = RateLimitedLog(log, level=logging.ERROR)
        self._handlers = handlers_for(SCHEDULER, self)    # kind -> its handler (core/kinds.py)

    # ---------------------------------------------------------------- rendezvous
    def _reject(self, msg: wire.Message, reason: str) -> None:
        meta = msg.meta
        self._rejects.log(meta.get("address"), "rejected registration %s: %s", meta, reason)
        address = meta.get("address")
        if isinstance(address, str) and address.startswith("tcp://"):
            # a one-off reply: the connection closes behind it, so a flood of bogus
            # REGISTERs naming addresses that never answer leaves no sockets behind. With
            # CURVE it goes only to a node holding the key the REGISTER was sent with
            principal = msg.origin if msg.origin is not None else meta.get("dc", "")
            self.van.connect(address, address, principal=str(principal))
            self.van.send(address, wire.Message(wire.Kind.ERROR, meta={"reason": reason}))
            self.van.disconnect(address)

    def rendezvous(self) -> NodeTable:
        """Wait for every expected node, assign ids and ranks, send each the node table."""
        registration = Registration(self.config.dcs)
        deadline = time.monotonic() + self.config.timeout_s
        every = min(PROGRESS_S, self.config.timeout_s / 4)
        next_progress = time.monotonic() + every
        while not registration.complete:
            self._check_stop()
            remaining = deadline - time.monotonic()
            if time.monotonic() >= next_progress:      # never silent while waiting
                log.info("waiting: %s; %.0f s left", registration.progress(), remaining)
                next_progress += every
            msg = self.van.recv(max(0.0, min(remaining, self.config.heartbeat_s,
                                             next_progress - time.monotonic())))
            if msg is None and time.monotonic() < deadline:
                continue
            if msg is None:
                reason = (f"waited {self.config.timeout_s:g}s for registration; still missing: "
                          + ", ".join(registration.missing()))
                self._abort_nodes(registration.registered, reason)
                raise ClusterAborted(reason)
            if msg.kind != wire.Kind.REGISTER:
                self._drops.log(msg.sender, "ignored %s from unregistered node %d during "
                                "rendezvous", msg.kind.name, msg.sender)
                continue
            problem = roles.register_refusal(msg.meta, msg.origin) or \
                registration.add(msg.meta)
            if problem:
                self._reject(msg, problem)
                continue
            log.info("registered %s of %s at %s (pid %s on %s)", msg.meta["role"],
                     msg.meta["dc"], msg.meta["address"], msg.meta.get("pid"),
                     msg.meta.get("host"))
        self.table = registration.table(self.van.address)
        servers = [n for n in self.table.nodes.values() if n.role == SERVER]
        if needs_measurement(self.config):
            # servers first, without a policy; workers only once the policy is out
            self._welcome(servers, None)
            rates = self._measure_links(servers)
            try:
                policy, description = initial_policy(self.config, measured=rates)
            except ValueError as exc:
                raise ClusterAborted(str(exc)) from exc
            self._start_adaptation(policy, rates)
            self._broadcast_servers(wire.Kind.POLICY, {"policy": policy.to_json()})
            self._welcome(self.table.workers(), policy)
        else:
            policy, description = initial_policy(self.config)
            self._start_adaptation(policy, None)
            self._welcome(servers + self.table.workers(), policy)
        if needs_measurement(self.config) and self.wan_topology is not None:
            # the servers' welcome had no rates yet: send the measured ones for detours
            self._broadcast_servers(wire.Kind.ROUTES, {"relays": [], "rates": [
                [a, b, m] for (a, b), m in self.wan_topology.rates().items()]})
        if self.adaptation is not None:
            self._send_routes()
        log.info("cluster complete: %d DCs, %d workers; policy %s", len(self.table.dcs),
                 len(self.table.workers()), description)
        return self.table

    def _start_adaptation(self, policy, measured) -> None:
        """Once the first policy is set: log it, keep the WAN it was planned on (servers
        choose detours by its rates) and, with ``adapt`` (multi-root policies only), start
        re-planning from the servers' reports."""
        self.rounds.first_policy(policy)
        self._log_policy("initial")
        if self.config.links or measured:
            self.wan_topology = planning_topology(self.config, measured)
            self.settings = self.settings.with_links(self.wan_topology.links)
        if not self.round_gate:          # the round gate is on exactly when re-planning is
            return
        replanner = Replanner(NOMINAL_MODEL_BYTES, self.config.chunk_bytes,
                              self.config.replan_threshold, self.config.min_dwell_s,
                              split=self.config.trees == "split")
        replanner.switched(time.monotonic())
        self.adaptation = Adaptation(self.wan_topology, replanner, self.stats,
                                     multipath=self.config.multipath)

    def _log_policy(self, reason: str, predicted_s=None) -> None:
        policy = self.rounds.policy
        self.stats({"t": round(time.monotonic(), 3), "event": "policy", "reason": reason,
                    "version": policy.version, "start_round": policy.start_round,
                    "round": self.rounds.latest, "predicted_s": predicted_s,
                    "trees": [{**t.to_json(), "share": round(s, 4)}
                              for t, s in zip(policy.trees, policy.shares)]})

    def _welcome(self, nodes, policy, rejoined: bool = False) -> None:
        now = time.monotonic()
        meta = {"nodes": self.table.to_json(),
                "policy": None if policy is None else policy.to_json(),
                "settings": self.settings.to_json(), "rejoined": rejoined}
        for node in nodes:
            self.van.connect(node.id, node.address, principal=node.dc)
            self.van.send(node.id, wire.Message(wire.Kind.WELCOME,
                                                meta={**meta, "you": node.id}))
            self.last_seen[node.id] = now

    def _measure_links(self, servers) -> dict:
        """Ask every server to probe every other at once; ``{(src, dst): Mbit/s}``.
        Bounded by the request's ``timeout_s`` plus one heartbeat, whatever the network
        does."""
        request = ProbeRequest()
        for node in servers:
            self.van.send(node.id, wire.Message(wire.Kind.PROBE_REQUEST,
                                                meta=request.to_json()))
        rates, waiting = {}, {n.id for n in servers}
        deadline = time.monotonic() + request.timeout_s + 2 * self.config.heartbeat_s + 2.0
        while waiting:
            msg = self._recv(max(0.0, deadline - time.monotonic()))
            if msg is None:
                raise ClusterAborted("start-up link measurement: no report from "
                                     + ", ".join(self.table.describe(i) for i in waiting))
            if msg.kind == wire.Kind.PROBE_REPORT and msg.sender in waiting:
                waiting.discard(msg.sender)
                dst = self.table[msg.sender].dc
                for src, mbps in msg.meta.get("rates", {}).items():
                    rates[(str(src), dst)] = float(mbps)
            else:
                self._node_alive(msg.sender)
        log.info("measured link rates (Mbit/s): %s",
                 ", ".join(f"{a}->{b} {r:.1f}" for (a, b), r in sorted(rates.items())))
        return rates

    def _abort_nodes(self, targets, reason: str) -> None:
        for target in targets:
            if isinstance(target, NodeInfo):
                peer, address, dc = target.id, target.address, target.dc
            else:           # an accepted REGISTER's meta
                peer, address, dc = target["address"], target["address"], target["dc"]
            self.van.connect(peer, address, principal=dc)
            self.van.send(peer, wire.Message(wire.Kind.ABORT, meta={"reason": reason}))

    # ---------------------------------------------------------------- running
    def _node_alive(self, node_id: int) -> None:
        self.last_seen[node_id] = time.monotonic()

    def _beat(self) -> None:
        """Every ``heartbeat_s``, a HEARTBEAT to every node still running: a node that hears
        nothing from the scheduler for ``dead_after_s`` stops, naming it."""
        now = time.monotonic()
        if now < self._next_beat:
            return
        self._check_stop()
        self._next_beat = now + self.config.heartbeat_s
        # esync: every server hears the cluster's slowest seconds per local step
        meta = {"step_s": max(self._step_s.values())} if self._step_s else {}
        for node in self.table.nodes.values():
            if node.role != SCHEDULER and node.id not in self.finished and \
                    node.id not in self.lost and self.van.is_connected(node.id):
                self.van.send(node.id, wire.Message(
                    wire.Kind.HEARTBEAT, meta=meta if node.role == SERVER else {}))

    def _recv(self, timeout_s: float):
        """The next message the scheduler admits from a node of the table
        (:func:`roles.refusal`), or None once ``timeout_s`` passed; beats meanwhile."""
        me = self.table.scheduler()
        deadline = time.monotonic() + timeout_s
        while True:
            self._beat()
            now = time.monotonic()
            msg = self.van.recv(max(0.0, min(deadline, self._next_beat) - now))
            if msg is None:
                if time.monotonic() < deadline:
                    continue
                return None
            if KINDS[msg.kind].before_table:     # a REGISTER: checked by _on_register
                return msg
            refusal = roles.refusal(self.table, me, msg)
            if not refusal:
                return msg
            self._drops.log((msg.origin, msg.sender), "dropped: %s", refusal)

    def _check_liveness(self) -> None:
        now = time.monotonic()
        for node_id, seen in list(self.last_seen.items()):
            if node_id in self.finished:
                continue
            if now - seen > self.config.dead_after_s:
                why = (f"sent nothing for {now - seen:.1f}s (dead_after_s="
                       f"{self.config.dead_after_s:g}); it is presumed dead")
                if not self._lose(node_id, why):
                    raise ClusterAborted(f"{self.table.describe(node_id)} {why}")
        for lost in self.lost.overdue(now):
            raise ClusterAborted(f"{lost.node.describe()} {lost.why}, and did not rejoin "
                                 f"within timeout_s = {self.config.timeout_s:g}s")
        why = self.replacement.overdue(now) if self.replacement is not None else ""
        if why:
            raise ClusterAborted(f"replacing the server of {self.replacement.lost_dc}: {why} "
                                 f"within timeout_s = {self.config.timeout_s:g}s")

    def _lose(self, node_id: int, why: str) -> bool:
        """Await a dead worker's or server's return (``[recovery] worker_restarts``,
        ``server_restarts``); False if the cluster must abort instead (a second server
        lost while one is being replaced, too)."""
        node = self.table[node_id]
        if node.role == SERVER and (self.replacement is not None or any(
                n.role == SERVER for n in (l.node for l in self.lost.lost.values()))):
            return False
        if not self.lost.lose(node, time.monotonic(), why):
            return False
        self.last_seen.pop(node_id, None)
        log.warning("%s %s; waiting up to %gs for it to rejoin (%d restart(s) left)",
                    node.describe(), why, self.config.timeout_s,
                    self.lost.remaining(node_id, node.role))
        return True

    def _supersede(self, meta: dict) -> None:
        """A new process registering in the place of a worker (its rank) or a server (its
        DC) still taken for alive: its launcher restarted it before the silence gave it
        away (only a holder of that DC's key can register there)."""
        role, dc = meta.get("role"), meta.get("dc")
        for node in self.table.nodes.values():
            if node.role != role or node.dc != dc or node.id in self.lost or \
                    node.id in self.finished:
                continue
            if role == SERVER:
                self._lose(node.id, "was replaced by a new process")
            elif node.local_rank == meta.get("local_index"):
                self._lose(node.id, "was replaced by a new process in its rank")

    def _on_register(self, msg: wire.Message) -> None:
        """A REGISTER while running: a lost worker coming back into its rank, or refused."""
        problem = roles.register_refusal(msg.meta, msg.origin)
        if not problem:
            self._supersede(msg.meta)
        node, why = self.lost.rejoin(msg.meta) if not problem else (None, problem)
        if node is None:
            self._reject(msg, why)
            return
        if node.role == SERVER:
            self._replace_server(node, msg.meta)
            return
        self.table.nodes[node.id] = node
        self.van.disconnect(node.id)
        self._welcome([node], self.rounds.policy, rejoined=True)
        server = self.table.server_of(node.dc)
        self.van.send(server.id, wire.Message(wire.Kind.NODE_MOVED,
                                              meta={"node": node.to_json()}))
        log.info("%s rejoined at %s (pid %s on %s)", node.describe(), node.address,
                 msg.meta.get("pid"), node.host)

    def _replace_server(self, node: NodeInfo, meta: dict) -> None:
        """A new server process for a lost one (docs/recovery.md): it gets the table with no
        policy yet; every other server and the DC's workers learn its address; the
        survivors freeze and report, and the replay follows their reports."""
        self.table.nodes[node.id] = node
        self.van.disconnect(node.id)
        self._welcome([node], None, rejoined=True)
        moved = wire.Message(wire.Kind.NODE_MOVED, meta={"node": node.to_json()})
        for other in self.table.nodes.values():
            if other.id != node.id and other.id not in self.finished and (
                    other.role == SERVER or other.dc == node.dc and other.role != SCHEDULER):
                self.van.send(other.id, moved)
        survivors = [n for n in self.table.nodes.values() if n.role == SERVER and n is not node]
        version = self.rounds.policy.version + 1
        if self.adaptation is not None:     # its links looked dead while it was
            self.adaptation.forget(node.dc, time.monotonic())
        self.replacement = ServerReplacement(node.dc, {n.dc for n in survivors},
                                             time.monotonic() + self.config.timeout_s)
        for other in survivors:
            self.van.send(other.id, wire.Message(wire.Kind.RECOVER,
                                                 meta={"dc": node.dc, "version": version}))
        log.warning("%s rejoined at %s (pid %s on %s): the %d other servers freeze and "
                    "report their replicas", node.describe(), node.address, meta.get("pid"),
                    node.host, len(survivors))
        self.stats({"t": round(time.monotonic(), 3), "event": "replace", "dc": node.dc})

    def _on_state_report(self, msg: wire.Message) -> None:
        if self.replacement is None:
            return
        self.replacement.report(self.table[msg.sender].dc, msg.meta["keys"])
        if not self.replacement.reported:
            return
        try:
            plan = self.replacement.make_plan()
        except RecoveryError as exc:
            raise ClusterAborted(f"replacing the server of {self.replacement.lost_dc}: "
                                 f"{exc}") from exc
        policy = self.rounds.replay_policy(self.replacement.start_round)
        self._broadcast_servers(wire.Kind.REPLAY, {
            "policy": policy.to_json(), "opened": self.rounds.opened,
            "keys": [[k, r, list(holders), d] for k, (r, holders, d) in sorted(plan.items())]})
        self._log_policy("replay")
        log.info("replay policy %d from round %d for %d keys", policy.version,
                 policy.start_round, len(plan))

    def _on_recovered(self, msg: wire.Message) -> None:
        dc = self.table[msg.sender].dc
        if self.replacement is None or not self.replacement.back(dc):
            return
        took = time.monotonic() - (self.replacement.deadline - self.config.timeout_s)
        log.warning("the server of %s was replaced in %.1fs; every DC replays from its "
                    "planned rounds", self.replacement.lost_dc, took)
        self.stats({"t": round(time.monotonic(), 3), "event": "replaced",
                    "dc": self.replacement.lost_dc, "seconds": round(took, 3)})
        self.replacement = None
        if self.adaptation is not None:
            self._send_routes()

    def _on_barrier(self, msg: wire.Message) -> None:
        if msg.seq not in self.barriers and len(self.barriers) >= MAX_EARLY_MESSAGES:
            self._drops.log(msg.sender, "dropped BARRIER %d from %s: %d barriers are open",
                            msg.seq, self.table.describe(msg.sender), len(self.barriers))
            return
        waiting = self.barriers.setdefault(msg.seq, set())
        waiting.add(msg.sender)
        if len(waiting) == len(self.table.workers()):
            for node in self.table.workers():
                self.van.send(node.id, wire.Message(wire.Kind.BARRIER_DONE, seq=msg.seq))
            del self.barriers[msg.seq]

    def _on_bye(self, msg: wire.Message) -> None:
        node = self.table[msg.sender]
        if not msg.meta.get("clean", True):
            why = f"failed: {msg.meta.get('reason', 'no reason given')}"
            if self._lose(msg.sender, why):
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
        if self.settings.sync.mode == "esync":      # the others go on without it
            for dc in self.table.dcs:
                self.van.send(self.table.server_of(dc).id,
                              wire.Message(wire.Kind.WORKER_LEFT, meta=meta))

    def _on_round_report(self, msg: wire.Message) -> None:
        """A server's heartbeat carries its round (and, with adapt, its link estimates)."""
        reported = int(msg.meta["round"])
        now = time.monotonic()
        self.rounds.report(msg.sender, reported, now)
        if "step_s" in msg.meta:            # esync: the DC's slowest seconds per step
            self._step_s[self.table[msg.sender].dc] = float(msg.meta["step_s"])
        if self.adaptation is not None:
            self.adaptation.on_report(self.table[msg.sender].dc, msg.meta, now)
        if self.round_gate:
            self._open_round(reported)

    def serve(self) -> None:
        """Run until every worker said BYE; raise :class:`ClusterAborted` on a failure."""
        workers = {n.id for n in self.table.workers()}
        next_switch = time.monotonic() + self.switch_every_s
        while not workers <= self.finished:
            if self.switch_every_s and time.monotonic() >= next_switch and \
                    self.replacement is None:
                self.announce(*random_trees(self.table.dcs, self._rng, split=True),
                              lead_rounds=2)
                next_switch = time.monotonic() + self.switch_every_s
            msg = self._recv(self.config.heartbeat_s)
            if msg is not None:
                self._dispatch(msg)
            if not self.van.pending():  # beats that queued up while it was busy come first
                self._check_liveness()
            self._adapt()

    def _dispatch(self, msg: wire.Message) -> None:
        """Hand a message to its kind's handler (core/kinds.py); one from a node already
        lost is dropped, any other says its sender is alive (a REGISTER's has no id yet)."""
        if KINDS[msg.kind].before_table:
            self._handlers[msg.kind](msg)
        elif msg.sender not in self.lost:
            self._node_alive(msg.sender)
            handler = self._handlers.get(msg.kind)
            if handler is not None:
                handler(msg)
            else:
                self._ignore(msg)

    def _ignore(self, msg: wire.Message) -> None:
        self._drops.log(msg.sender, "ignored unexpected %s from %s", msg.kind.name,
                        self.table.describe(msg.sender))

    def _on_heartbeat(self, msg: wire.Message) -> None:
        if "round" in msg.meta:
            self._on_round_report(msg)

    def _on_abort(self, msg: wire.Message) -> None:
        raise ClusterAborted(f"{self.table.describe(msg.sender)} aborted: "
                             f"{msg.meta.get('reason', '?')}")

    def _on_probe_report(self, msg: wire.Message) -> None:
        """Reports are taken while links are measured (:meth:`_measure_links`); a later
        one is unexpected."""
        self._ignore(msg)

    def _adapt(self) -> None:
        if self.adaptation is None or self.replacement is not None or \
                not self.adaptation.due(time.monotonic()):
            return
        plan = self.adaptation.tick(self.rounds.policy, time.monotonic(), self.rounds.latest,
                                    self.rounds.round_seen, self.rounds.announced.for_round)
        if plan is not None:
            self.announce(plan.policy.trees, plan.shares, lead_rounds=1)
            self._log_policy("re-planned", round(plan.predicted_s, 4))
        self._send_routes()

    def _broadcast_servers(self, kind, meta: dict, seq: int = 0) -> None:
        for node in self.table.nodes.values():
            if node.role == SERVER:
                self.van.send(node.id, wire.Message(kind, seq=seq, meta=meta))

    def _open_round(self, rnd: int) -> None:
        """A server wants to start round ``rnd``: from now on every policy it could use is
        final, so open it everywhere. A policy announced before this went out first on the
        same connections, so every server knows it before the round opens."""
        if rnd <= self.rounds.opened:
            return
        before = self.rounds.policy_in_force()
        self.rounds.open(rnd)
        self._broadcast_servers(wire.Kind.ROUND_OPEN, {}, seq=rnd)
        now_in_force = self.rounds.policy_in_force()
        self.stats({"t": round(time.monotonic(), 3), "event": "round_open", "round": rnd,
                    "version": now_in_force.version})
        if self.adaptation is not None and now_in_force is not before:
            self._send_routes()             # relays for the trees now carrying chunks

    def _send_routes(self) -> None:
        """Multipath relays (and the rates detours choose by) when they changed."""
        routes = self.adaptation.routes(self.rounds.policy_in_force())
        if routes is None:
            return
        self._broadcast_servers(wire.Kind.ROUTES, routes)
        self.stats({"t": round(time.monotonic(), 3), "event": "routes",
                    "relays": routes["relays"]})

    def announce(self, trees, shares, lead_rounds: int = 3):
        """Send a new policy version to every server. With ``round_gate`` it is in force from
        the first round not yet open. Otherwise from
        :meth:`~netstorm.scheduler.rounds.RoundTracker.rounds_ahead`: ahead of time, so every DC
        switches at the same round boundary without a barrier; a server that gets it too
        late aborts the run with a clear error rather than disagree with the others."""
        policy = self.rounds.next_policy(trees, shares, lead_rounds, time.monotonic())
        self._broadcast_servers(wire.Kind.POLICY, {"policy": policy.to_json()})
        log.info("announced policy %d from round %d%s", policy.version, policy.start_round,
                 f" (round {self.rounds.opened} open)" if self.round_gate else "")
        return policy

    def run(self) -> int:
        try:
            self.rendezvous()
            self.serve()
        except ClusterAborted as exc:
            log.error("aborting the cluster: %s", exc)
            self.abort_reason = str(exc)
            if self.table is not None:
                others = [n for n in self.table.nodes.values()
                          if n.role != SCHEDULER and n.id not in self.finished]
                self._abort_nodes(others, str(exc))
            return EXIT_ABORTED         # another node failed (the reason names it)
        self._broadcast_servers(wire.Kind.SHUTDOWN, {})
        log.info("all workers finished; servers told to shut down")
        return 0
