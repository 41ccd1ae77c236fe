"""The scheduler process's loop: rendezvous, barriers, liveness, the WAN policy.

One thread, one loop: it blocks on its socket with a timeout no longer than the heartbeat
interval, so it wakes to check liveness without busy-waiting. The decisions live in pure
parts: who may register and which ids and ranks they get (:mod:`netstorm.scheduler.registration`),
which rounds servers are in, which are open and from which round a new policy applies
(:mod:`netstorm.scheduler.rounds`), what every node is told about how to run
(:class:`~netstorm.geoserver.config.settings.RuntimeSettings`, built once from the cluster file).
The loop holds its parts: the nodes' liveness, heartbeats and stop notes (``liveness``:
:mod:`netstorm.scheduler.liveness`), the policies announced and rounds opened (``policies``:
:mod:`netstorm.scheduler.announcer`) and the replacement of a lost DC server (``replacing``:
:mod:`netstorm.scheduler.replacing`); it dispatches each message to them.
"""
from __future__ import annotations

import logging
import random
import time

from netstorm.geoserver.core import roles, wire
from netstorm.geoserver.core.kinds import KINDS, handlers_for
from netstorm.geoserver.config.exit_reasons import EXIT_ABORTED, describe
from netstorm.geoserver.config.cluster import ClusterConfig
from netstorm.geoserver.core.nodes import SCHEDULER, SERVER, NodeInfo, NodeTable
from netstorm.geoserver.core.ratelog import RateLimitedLog
from netstorm.geoserver.config.settings import MAX_EARLY_MESSAGES, ProbeRequest, RuntimeSettings
from netstorm.geoserver.core.van import Van

from .announcer import PolicyAnnouncer
from .auditing import ReplicaAuditing
from .liveness import ClusterAborted, Liveness
from .policy import initial_policy, needs_measurement, random_trees
from .rebuilding import SchedulerRebuilding
from .quorum import QuorumRounds
from .departing import DcDeparting
from .joining import DcJoining, placeholder_address
from .replacing import ServerReplacing
from .registration import SCHEDULER_ID, Registration
from .status import view_of

__all__ = ["PROGRESS_S", "ClusterAborted", "Scheduler"]

__all__ = ["ClusterAborted", "PROGRESS_S", "Scheduler"]

log = logging.getLogger("netstorm.scheduler")
PROGRESS_S = 10.0     # at most this long between "waiting: ..." lines while nodes register


class Scheduler:
    def __init__(self, config: ClusterConfig, van: Van, switch_every_s: float = 0.0,
                 seed: int = 0, stats=None, check_stop=lambda: None, status=None):
        """``check_stop``: called once a beat; raises to stop the scheduler (a signal).
        ``status``: the :class:`~.status.ClusterStatus` fed from the loop (None: none)."""
        self.config = config
        self._check_stop = check_stop
        # what servers and workers are told; the WAN's links join once they are known
        self.settings = RuntimeSettings.from_cluster(config)
        self.stats = stats or (lambda record: None)    # JSON-lines sink (``[scheduler] stats``)
        # test mode: announce a random policy this often, to exercise policy switches live
        self.switch_every_s = switch_every_s
        self._rng = random.Random(seed)
        self.van = van
        self.van.node_id = SCHEDULER_ID
        self.table: NodeTable | None = None
        self.liveness = Liveness(config, van, check_stop, on_stall=lambda text: self.stats(
            {"t": round(time.monotonic(), 3), "event": "stall", "message": text}))
        self.finished, self.lost = self.liveness.finished, self.liveness.lost
        self.barriers: dict = {}
        # adapt: servers start a round only once it is open, and a re-planned policy starts
        # at the first round not yet open - the very next round, with no lead and no race
        self.round_gate = self.settings.round_gate
        self.policies = PolicyAnnouncer(config, self.round_gate, self.stats,
                                        self._broadcast_servers)
        self.rounds = self.policies.rounds
        self.replacing = ServerReplacing(config, van, self.stats, self.policies, self.liveness,
                                        self._welcome)
        # the DCs' replica digests compared (docs/recovery-audit.md)
        self.auditing = ReplicaAuditing([dc.name for dc in config.dcs], self.stats,
                                        self.replacing, config.server_restarts)
        self.rebuilding = SchedulerRebuilding(self)     # taking a running cluster over
        self.departing = DcDeparting(config, van, self.stats, self.policies, self.liveness)
        # one change at a time, but DCs silent together leave together (departing.py)
        self.liveness.depart = lambda node_id, why: self.departing.depart(
            node_id, why, self.replacing.current is not None or
            self.joining.current is not None)
        self.liveness.leaves_for_now = self._leaves_for_now
        self.joining = DcJoining(config, van, self.stats, self.policies, self.liveness,
                                 self.departing, self._welcome)
        self.departing.on_left = self.joining.hold
        self.abort_reason = ""                 # why run() aborted the cluster
        self._drops = RateLimitedLog(log)      # about messages from strangers
        self._rejects = RateLimitedLog(log, level=logging.ERROR)
        self._handlers = handlers_for(SCHEDULER, self)    # kind -> its handler (core/kinds.py)
        self.status = status
        sync = self.settings.sync       # quorum rounds (hfa, diloco): scheduler/quorum.py
        self.quorum = QuorumRounds({dc.name: dc.workers for dc in config.dcs}, sync.quorum,
                                   sync.grace_s) \
            if sync.quorum_in_force(len(config.dcs)) else None

    @property
    def replacement(self):
        """The lost DC server being replaced (a pure ``ServerReplacement``), or the DC
        leaving or joining (scheduler/departing.py, joining.py), or None: one at a time."""
        return self.replacing.current or self.departing.current or self.joining.current

    def _leaves_for_now(self, node_id: int) -> bool:
        """Elastic with rejoins: ``node_id``'s DC may leave now and come back later."""
        membership, dc = self.departing.membership, self.table[node_id].dc
        return membership.may_come_back(dc) and not membership.leave_refusal(dc)

    @property
    def _outside(self) -> set:
        """Elastic: the nodes of DCs not in the run (not joined yet, or departed)."""
        return self.departing.departed_nodes | self.joining.absent_nodes

    @property
    def _next_beat(self) -> float:
        return self.liveness.next_beat

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
        while not registration.complete and not registration.ready(self.config.min_dcs):
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
            if "report" in msg.meta:        # a running cluster (scheduler_restarts)
                return self.rebuilding.run(msg, deadline, registration.registered)
            problem = roles.register_refusal(msg.meta, msg.origin) or \
                registration.add(msg.meta)
            if problem:
                self._reject(msg, problem)
                continue
            log.info("registered %s of %s at %s (pid %s on %s)", msg.meta["role"],
                     msg.meta["dc"], msg.meta["address"], msg.meta.get("pid"),
                     msg.meta.get("host"))
        absent = [] if registration.complete else \
            registration.hold_places(placeholder_address)     # elastic: they join later
        self.table = self.liveness.table = registration.table(self.van.address)
        outside = self.joining.hold_places(absent)
        servers = [n for n in self.table.nodes.values()
                   if n.role == SERVER and n.id not in outside]
        workers = [n for n in self.table.workers() if n.id not in outside]
        if needs_measurement(self.config) and not absent:
            # servers first, without a policy; workers only once the policy is out
            self._welcome(servers, None)
            rates = self._measure_links(servers)
            try:
                policy, description = initial_policy(self.config, measured=rates)
            except ValueError as exc:
                raise ClusterAborted(str(exc)) from exc
            self._start_adaptation(policy, rates)
            self._broadcast_servers(wire.Kind.POLICY, {"policy": policy.to_json()})
            self._welcome(workers, policy)
        else:
            policy, description = self.joining.first_policy(absent) if absent else \
                initial_policy(self.config)     # elastic: over the DCs that are here
            self._start_adaptation(policy, None)
            self._welcome(servers + workers, policy)
        if needs_measurement(self.config) and self.policies.wan_topology is not None:
            # the servers' welcome had no rates yet: send the measured ones for detours
            self._broadcast_servers(wire.Kind.ROUTES, {"relays": [], "rates": [
                [a, b, m] for (a, b), m in self.policies.wan_topology.rates().items()]})
        if self.policies.adaptation is not None:
            self.policies.send_routes()
        log.info("cluster complete: %d DCs, %d workers; policy %s", len(servers),
                 len(workers), description)
        return self.table

    def _start_adaptation(self, policy, measured) -> None:
        """Once the first policy is set (:meth:`PolicyAnnouncer.start`): the WAN it was
        planned on joins the settings (servers choose detours by its rates)."""
        self.policies.start(policy, measured)
        if self.policies.wan_topology is not None:
            self.settings = self.settings.with_links(self.policies.wan_topology.links)

    def _welcome(self, nodes, policy, rejoined: bool = False, rebuilt: bool = False) -> None:
        now = time.monotonic()
        meta = {"nodes": self.table.to_json(),
                "policy": None if policy is None else policy.to_json(),
                "settings": self.settings.to_json(), "rejoined": rejoined,
                "rebuilt": rebuilt}
        for node in nodes:
            self.van.connect(node.id, node.address, principal=node.dc)
            self.van.send(node.id, wire.Message(wire.Kind.WELCOME,
                                                meta={**meta, "you": node.id}))
            self.liveness.last_seen[node.id] = now

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
        self.liveness.seen(node_id)

    def _beat(self) -> None:
        self.liveness.beat()

    def _recv(self, timeout_s: float):
        """The next message the scheduler admits from a node of the table
        (:func:`roles.refusal`), or None once ``timeout_s`` passed; beats meanwhile."""
        me = self.table.scheduler()
        deadline = time.monotonic() + timeout_s
        while True:
            self._beat()
            now = time.monotonic()
            due = self.liveness.due_at()        # a verdict due (scheduler/liveness.py)
            msg = self.van.recv(max(0.0, min(deadline, self._next_beat, due) - now))
            if msg is None:
                if time.monotonic() < min(deadline, due):
                    continue
                return None
            if KINDS[msg.kind].before_table:     # a REGISTER: checked by _on_register
                return msg
            refusal = roles.refusal(self.table, me, msg)
            if not refusal:
                return msg
            self._drops.log((msg.origin, msg.sender), "dropped: %s", refusal)

    def _check_liveness(self) -> None:
        self.liveness.check(self.replacement, waiting=self.van.pending())

    def _on_register(self, msg: wire.Message) -> None:
        """A REGISTER while running: a lost worker coming back into its rank, or refused."""
        if "report" in msg.meta:        # a node that took this scheduler for dead
            self.rebuilding.rewelcome(msg)
            return
        problem = roles.register_refusal(msg.meta, msg.origin)
        if not problem and self.joining.claims(msg.meta):     # elastic: a DC joins
            problem = self.joining.register(msg.meta)
            if problem:
                self._reject(msg, problem)
            return
        if not problem:
            self.liveness.supersede(msg.meta, self.replacement is not None)
        node, why = self.lost.rejoin(msg.meta) if not problem else (None, problem)
        if node is None:
            self._reject(msg, why)
            return
        if node.role == SERVER:
            self.replacing.replace(node, msg.meta)
            return
        self.table.nodes[node.id] = node
        self.van.disconnect(node.id)
        # its server learns where it is before it can ask (RESUME): the answer goes there
        server = self.table.server_of(node.dc)
        self.van.send(server.id, wire.Message(wire.Kind.NODE_MOVED,
                                              meta={"node": node.to_json()}))
        self._welcome([node], self.rounds.policy, rejoined=True)
        log.info("%s rejoined at %s (pid %s on %s)", node.describe(), node.address,
                 msg.meta.get("pid"), node.host)

    def _on_state_report(self, msg: wire.Message) -> None:
        if self.joining.on_state_report(self.table[msg.sender].dc, msg.meta):
            return
        if not self.departing.on_state_report(self.table[msg.sender].dc, msg.meta):
            self.replacing.on_state_report(self.table[msg.sender].dc, msg.meta)

    def _on_recovered(self, msg: wire.Message) -> None:
        dc = self.table[msg.sender].dc
        if not self.joining.on_recovered(dc) and not self.departing.on_recovered(dc):
            self.replacing.on_recovered(dc)
        self.joining.start_waiting()        # a DC registered to join while that went on

    def _on_barrier(self, msg: wire.Message) -> None:
        if msg.seq not in self.barriers and len(self.barriers) >= MAX_EARLY_MESSAGES:
            self._drops.log(msg.sender, "dropped BARRIER %d from %s: %d barriers are open",
                            msg.seq, self.table.describe(msg.sender), len(self.barriers))
            return
        waiting = self.barriers.setdefault(msg.seq, set())
        waiting.add(msg.sender)
        members = [n for n in self.table.workers() if n.id not in self._outside]
        if len(waiting - self._outside) == len(members):
            for node in members:
                self.van.send(node.id, wire.Message(wire.Kind.BARRIER_DONE, seq=msg.seq))
            del self.barriers[msg.seq]

    def _on_bye(self, msg: wire.Message) -> None:
        if msg.sender not in self.finished:     # not a BYE sent again to a new scheduler
            self.liveness.bye(msg, self.replacement is not None,
                              self.settings.sync.mode == "esync")
        if self.settings.scheduler_restarts and msg.meta.get("clean", True):
            self.rebuilding.acknowledge_bye(self.table[msg.sender])
        dc = self.table[msg.sender].dc
        if self.quorum is not None and \
                all(n.id in self.finished for n in self.table.workers(dc)):
            self._send_quorums(self.quorum.finished(dc, time.monotonic()))

    def _on_round_report(self, msg: wire.Message) -> None:
        """A server's heartbeat carries its round (and, with adapt, its link estimates)."""
        dc = self.table[msg.sender].dc
        if "step_s" in msg.meta:            # esync: the DC's slowest seconds per step
            self.liveness.step_s[dc] = float(msg.meta["step_s"])
        self.policies.report(msg.sender, dc, msg.meta)
        if "audit" in msg.meta and self.table[msg.sender].role == SERVER:
            self.auditing.on_heartbeat(dc, msg.meta["audit"])
        if self.status is not None:
            self.status.on_report(dc, msg.meta, time.monotonic())

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
            msg = self._recv(self._quorum_wait_s())
            if msg is not None:
                self._dispatch(msg)
            if self.quorum is not None:
                self._send_quorums(self.quorum.due(time.monotonic()))
            self._check_liveness()
            self._adapt()
            self._status_tick()

    def _quorum_wait_s(self) -> float:
        """How long the loop may wait for a message: a heartbeat, or until a quorum round's
        grace window closes."""
        deadline = None if self.quorum is None else self.quorum.deadline()
        if deadline is None:
            return self.config.heartbeat_s
        return min(self.config.heartbeat_s, max(0.0, deadline - time.monotonic()))

    def _on_quorum_ready(self, msg: wire.Message) -> None:
        """A DC offers its rounds for WAN round ``seq`` (quorum rounds); unexpected without
        them."""
        if self.quorum is None:
            self._ignore(msg)
            return
        self._send_quorums(self.quorum.ready(self.table[msg.sender].dc, msg.seq,
                                             time.monotonic(), int(msg.meta["through"])))

    def _send_quorums(self, decisions) -> None:
        """Each decided quorum round to every server, and to the stats."""
        for decision in decisions:
            self._broadcast_servers(wire.Kind.QUORUM, decision.to_meta(), seq=decision.round)
            self.stats({"t": round(time.monotonic(), 3), "event": "quorum",
                        "round": decision.round, "weights": decision.weights})
            if decision.weights != self.quorum.workers:     # not everyone on time
                left_out = sorted(self.quorum.running - set(decision.weights))
                log.info("quorum round %d: %s worker-rounds%s", decision.round,
                         ", ".join(f"{dc} {w}" for dc, w in sorted(decision.weights.items())),
                         f"; went on without {', '.join(left_out)}" if left_out else "")

    def _status_tick(self) -> None:
        """Once a second: the status page's snapshot; every few seconds the summary line."""
        if self.status is not None:
            line = self.status.tick(lambda: view_of(self), time.monotonic())
            if line:
                log.info("%s", line)

    def _dispatch(self, msg: wire.Message) -> None:
        """Hand a message to its kind's handler (core/kinds.py); one from a node already
        lost is dropped unless it was only silent (it is taken back: Liveness.revive), any
        other says its sender is alive (a REGISTER's has no id yet)."""
        if KINDS[msg.kind].before_table:
            self._handlers[msg.kind](msg)
        elif msg.sender in self._outside:     # elastic: its DC left or has not joined
            self._drops.log(msg.sender, "dropped %s from %s: its DC is not in the run",
                            msg.kind.name, self.table.describe(msg.sender))
            if msg.sender in self.departing.departed_nodes:
                self.departing.tell_left(msg.sender)
        elif msg.sender not in self.lost or self.liveness.revive(msg.sender):
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
        self.liveness.heartbeat(msg.sender, msg.meta)   # its gap, round trip (liveness.py)
        if "round" in msg.meta:
            self._on_round_report(msg)
        else:                               # a worker's: its data path (scheduler/stalls.py)
            self.liveness.heard(msg.sender, msg.meta)

    def _on_abort(self, msg: wire.Message) -> None:
        """A node stops (failed, or stopped by a signal): the run aborts, or, elastic, its
        DC leaves the run (scheduler/departing.py)."""
        if self.liveness.depart(msg.sender, f"stopped: {msg.meta.get('reason', '?')}"):
            return
        raise ClusterAborted(f"{self.table.describe(msg.sender)} aborted: "
                             f"{msg.meta.get('reason', '?')}")

    def _on_probe_report(self, msg: wire.Message) -> None:
        """Reports are taken while links are measured (:meth:`_measure_links`); a later
        one is unexpected."""
        self._ignore(msg)

    def _adapt(self) -> None:
        if self.replacement is None:
            self.policies.adapt()

    def _broadcast_servers(self, kind, meta: dict, seq: int = 0) -> None:
        for node in self.table.nodes.values():
            if node.role == SERVER and node.id not in self._outside:
                self.van.send(node.id, wire.Message(kind, seq=seq, meta=meta))

    def announce(self, trees, shares, lead_rounds: int = 3):
        """Send a new policy version to every server (:meth:`PolicyAnnouncer.announce`)."""
        return self.policies.announce(trees, shares, lead_rounds)

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
        except Exception as exc:
            # the scheduler's own failure: every node is told now (naming the scheduler and
            # the cause) instead of noticing its silence only after dead_after_s; then the
            # entry point's catch-all names it in the launcher's line
            self.abort_reason = f"the scheduler failed: {describe(exc)}"
            if self.table is not None:
                try:
                    self._abort_nodes([n for n in self.table.nodes.values()
                                       if n.role != SCHEDULER and n.id not in self.finished],
                                      self.abort_reason)
                except Exception as again:      # noqa: BLE001 - the first failure is raised
                    log.warning("could not tell the nodes the scheduler failed: %s", again)
            raise
        self.auditing.finish()
        self._broadcast_servers(wire.Kind.SHUTDOWN, {})
        log.info("all workers finished; servers told to shut down")
        return 0
