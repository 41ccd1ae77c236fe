"""The scheduler process: rendezvous, ids and ranks, barriers, liveness, the WAN policy.

One thread, one loop: it blocks on its socket with a timeout no longer than the heartbeat
interval, so it wakes to check liveness without busy-waiting.
"""
from __future__ import annotations

import collections
import logging
import math
import random
import time

from netstorm.geoserver import wire
from netstorm.geoserver.cluster import ClusterConfig
from netstorm.geoserver.postoffice import SCHEDULER, SERVER, WORKER, NodeInfo, NodeTable
from netstorm.geoserver.tree import Policy, PolicyBook
from netstorm.geoserver.van import Van

from .awareness import Adaptation, Replanner, safe_start_round
from .policy import NOMINAL_MODEL_BYTES, initial_policy, needs_measurement, planning_topology, \
    random_trees

PROBE_BYTES = 2 << 20       # per directed pair: enough to leave TCP slow start at WAN rates
PROBE_TIMEOUT_S = 6.0       # a measurement never takes longer than this
IDLE_PROBE_S = 5.0          # adapt: a link not timed this long gets a probe burst

log = logging.getLogger("netstorm.scheduler")
SCHEDULER_ID = 0


class ClusterAborted(RuntimeError):
    """The run cannot continue; the text names the node and what was awaited."""


class Scheduler:
    def __init__(self, config: ClusterConfig, van: Van, switch_every_s: float = 0.0,
                 seed: int = 0, stats=None):
        self.config = config
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
        self.barriers: dict = {}
        self.rounds: dict = {}          # server id -> latest round started (from heartbeats)
        self.round_log = collections.deque(maxlen=64)   # (time, max round) as reported
        self.round_seen: dict = {}      # round -> when a DC was first reported in it
        self.policy = None
        # adapt: servers start a round only once it is open, and a re-planned policy starts
        # at the first round not yet open - the very next round, with no lead and no race
        self.round_gate = config.adapt and config.policy == "fapt" and len(config.dcs) > 1
        self.opened = 0                 # the latest round opened (round_gate)
        self.announced = PolicyBook()   # the policies sent that may still apply (relays follow
                                        # the one in force, which may be older than self.policy)

    # ---------------------------------------------------------------- rendezvous
    def _expected(self) -> dict:
        want = {}
        for dc in self.config.dcs:
            want[(SERVER, dc.name)] = 1
            want[(WORKER, dc.name)] = dc.workers
        return want

    def _missing(self, registered) -> list:
        missing = []
        for (role, dc), count in self._expected().items():
            have = sum(1 for r in registered if (r["role"], r["dc"]) == (role, dc))
            if have < count:
                missing.append(f"{count - have} {role}(s) of {dc}")
        return missing

    def _reject(self, meta: dict, reason: str) -> None:
        log.error("rejected registration %s: %s", meta, reason)
        address = meta.get("address")
        if isinstance(address, str) and address.startswith("tcp://"):
            self.van.connect(address, address)
            self.van.send(address, wire.Message(wire.Kind.ERROR, meta={"reason": reason}))

    def _check_registration(self, meta: dict, registered: list) -> str:
        role, dc = meta.get("role"), meta.get("dc")
        if role not in (SERVER, WORKER):
            return f"unknown role {role!r}"
        if not isinstance(dc, str) or (SERVER, dc) not in self._expected():
            return f"unknown DC {dc!r}; the cluster has {[d.name for d in self.config.dcs]}"
        if not isinstance(meta.get("address"), str):
            return "registration carries no address"
        same = [r for r in registered if (r["role"], r["dc"]) == (role, dc)]
        if len(same) >= self._expected()[(role, dc)]:
            return f"{dc} already has all its {role}s registered"
        index = meta.get("local_index", -1)
        if not isinstance(index, int):
            return "local_index must be an integer"
        if index >= 0 and any(r.get("local_index") == index for r in same):
            return f"{dc} already has a {role} with local index {index}"
        return ""

    def rendezvous(self) -> NodeTable:
        """Wait for every expected node, assign ids and ranks, send each the node table."""
        registered: list = []
        deadline = time.monotonic() + self.config.timeout_s
        while self._missing(registered):
            msg = self.van.recv(max(0.0, deadline - time.monotonic()))
            if msg is None:
                reason = (f"waited {self.config.timeout_s:g}s for registration; still missing: "
                          + ", ".join(self._missing(registered)))
                self._abort_nodes(registered, reason)
                raise ClusterAborted(reason)
            if msg.kind != wire.Kind.REGISTER:
                log.warning("ignored %s from unregistered node %d during rendezvous",
                            msg.kind.name, msg.sender)
                continue
            problem = self._check_registration(msg.meta, registered)
            if problem:
                self._reject(msg.meta, problem)
                continue
            registered.append(dict(msg.meta))
            log.info("registered %s of %s at %s (pid %s on %s)", msg.meta["role"],
                     msg.meta["dc"], msg.meta["address"], msg.meta.get("pid"),
                     msg.meta.get("host"))
        self.table = self._assign(registered)
        servers = [n for n in self.table.nodes.values() if n.role == SERVER]
        if needs_measurement(self.config):
            # servers first, without a policy; workers only once the policy is out
            self._welcome(servers, None)
            rates = self._measure_links(servers)
            try:
                self.policy, description = initial_policy(self.config, measured=rates)
            except ValueError as exc:
                raise ClusterAborted(str(exc)) from exc
            self._start_adaptation(rates)
            for node in servers:
                self.van.send(node.id, wire.Message(wire.Kind.POLICY,
                                                    meta={"policy": self.policy.to_json()}))
            self._welcome(self.table.workers(), self.policy)
        else:
            self.policy, description = initial_policy(self.config)
            self._start_adaptation(None)
            self._welcome(servers + self.table.workers(), self.policy)
        if needs_measurement(self.config) and self.wan_topology is not None:
            # the servers' welcome had no rates yet: send the measured ones for detours
            self._broadcast_servers(wire.Kind.ROUTES, {"relays": [], "rates": [
                [a, b, m] for (a, b), m in self.wan_topology.rates().items()]})
        if self.adaptation is not None:
            self._send_routes()
        log.info("cluster complete: %d DCs, %d workers; policy %s", len(self.table.dcs),
                 len(self.table.workers()), description)
        return self.table

    def _start_adaptation(self, measured) -> None:
        """Once the first policy is set: log it, keep the WAN it was planned on (servers
        choose detours by its rates) and, with ``adapt`` (multi-root policies only), start
        re-planning from the servers' reports."""
        self._log_policy("initial")
        self.announced.add(self.policy)
        if self.config.links or measured:
            self.wan_topology = planning_topology(self.config, measured)
        if not self.round_gate:          # the round gate is on exactly when re-planning is
            return
        replanner = Replanner(NOMINAL_MODEL_BYTES, self.config.chunk_bytes,
                              self.config.replan_threshold, self.config.min_dwell_s)
        replanner.switched(time.monotonic())
        self.adaptation = Adaptation(self.wan_topology, replanner, self.stats,
                                     multipath=self.config.multipath)

    def _log_policy(self, reason: str, predicted_s=None) -> None:
        self.stats({"t": round(time.monotonic(), 3), "event": "policy", "reason": reason,
                    "version": self.policy.version, "start_round": self.policy.start_round,
                    "round": max(self.rounds.values(), default=0),
                    "predicted_s": predicted_s,
                    "trees": [{"root": t.root, "share": round(s, 4), "parent": t.parent}
                              for t, s in zip(self.policy.trees, self.policy.shares)]})

    def _welcome(self, nodes, policy) -> None:
        now = time.monotonic()
        for node in nodes:
            self.van.connect(node.id, node.address)
            self.van.send(node.id, wire.Message(wire.Kind.WELCOME, meta={
                "nodes": self.table.to_json(), "you": node.id,
                "policy": None if policy is None else policy.to_json(),
                "chunk_bytes": self.config.chunk_bytes, "timeout_s": self.config.timeout_s,
                "heartbeat_s": self.config.heartbeat_s, "stall_s": self.config.stall_s,
                "probe_idle_s": IDLE_PROBE_S if self.config.adapt else 0.0,
                "round_gate": self.round_gate,
                "links": [] if self.wan_topology is None else
                [[l.a, l.b, l.mbps_ab, l.mbps_ba] for l in self.wan_topology.links]}))
            self.last_seen[node.id] = now

    def _measure_links(self, servers) -> dict:
        """Ask every server to probe every other at once; ``{(src, dst): Mbit/s}``.
        Bounded by ``PROBE_TIMEOUT_S`` plus one heartbeat, whatever the network does."""
        for node in servers:
            self.van.send(node.id, wire.Message(wire.Kind.PROBE_REQUEST, meta={
                "probe_bytes": PROBE_BYTES, "timeout_s": PROBE_TIMEOUT_S}))
        rates, waiting = {}, {n.id for n in servers}
        deadline = time.monotonic() + PROBE_TIMEOUT_S + 2 * self.config.heartbeat_s + 2.0
        while waiting:
            msg = self.van.recv(max(0.0, deadline - time.monotonic()))
            if msg is None:
                raise ClusterAborted("start-up link measurement: no report from "
                                     + ", ".join(self.table.describe(i) for i in waiting))
            if msg.kind == wire.Kind.PROBE_REPORT and msg.sender in waiting:
                waiting.discard(msg.sender)
                dst = self.table[msg.sender].dc
                for src, mbps in msg.meta.get("rates", {}).items():
                    rates[(str(src), dst)] = float(mbps)
            elif msg.sender in self.table:
                self._node_alive(msg.sender)
        log.info("measured link rates (Mbit/s): %s",
                 ", ".join(f"{a}->{b} {r:.1f}" for (a, b), r in sorted(rates.items())))
        return rates

    def _assign(self, registered: list) -> NodeTable:
        order = {dc.name: i for i, dc in enumerate(self.config.dcs)}
        nodes = [NodeInfo(SCHEDULER_ID, SCHEDULER, "", self.van.address)]
        servers = sorted((r for r in registered if r["role"] == SERVER),
                         key=lambda r: order[r["dc"]])
        for r in servers:
            nodes.append(NodeInfo(len(nodes), SERVER, r["dc"], r["address"]))
        rank = 0
        for dc in self.config.dcs:
            mine = [r for r in registered if r["role"] == WORKER and r["dc"] == dc.name]
            # explicit local indices first, in order; then the rest in registration order
            mine.sort(key=lambda r: (r["local_index"] < 0, max(r["local_index"], 0)))
            for local_rank, r in enumerate(mine):
                nodes.append(NodeInfo(len(nodes), WORKER, r["dc"], r["address"], rank,
                                      local_rank))
                rank += 1
        return NodeTable(nodes)

    def _abort_nodes(self, targets, reason: str) -> None:
        for target in targets:
            peer = target.id if isinstance(target, NodeInfo) else target["address"]
            address = target.address if isinstance(target, NodeInfo) else target["address"]
            self.van.connect(peer, address)
            self.van.send(peer, wire.Message(wire.Kind.ABORT, meta={"reason": reason}))

    # ---------------------------------------------------------------- running
    def _node_alive(self, node_id: int) -> None:
        self.last_seen[node_id] = time.monotonic()

    def _check_liveness(self) -> None:
        now = time.monotonic()
        for node_id, seen in self.last_seen.items():
            if node_id in self.finished:
                continue
            if now - seen > self.config.dead_after_s:
                raise ClusterAborted(f"{self.table.describe(node_id)} sent nothing for "
                                     f"{now - seen:.1f}s (dead_after_s="
                                     f"{self.config.dead_after_s:g}); it is presumed dead")

    def _on_barrier(self, msg: wire.Message) -> None:
        waiting = self.barriers.setdefault(msg.seq, set())
        waiting.add(msg.sender)
        if len(waiting) == len(self.table.workers()):
            for node in self.table.workers():
                self.van.send(node.id, wire.Message(wire.Kind.BARRIER_DONE, seq=msg.seq))
            del self.barriers[msg.seq]

    def _on_bye(self, msg: wire.Message) -> None:
        node = self.table[msg.sender]
        if not msg.meta.get("clean", True):
            raise ClusterAborted(f"{node.describe()} failed: "
                                 f"{msg.meta.get('reason', 'no reason given')}")
        log.info("%s finished", node.describe())
        self.finished.add(msg.sender)

    def serve(self) -> None:
        """Run until every worker said BYE; raise :class:`ClusterAborted` on a failure."""
        workers = {n.id for n in self.table.workers()}
        next_switch = time.monotonic() + self.switch_every_s
        while not workers <= self.finished:
            if self.switch_every_s and time.monotonic() >= next_switch:
                self.announce(*random_trees(self.table.dcs, self._rng), lead_rounds=2)
                next_switch = time.monotonic() + self.switch_every_s
            msg = self.van.recv(self.config.heartbeat_s)
            if msg is not None:
                if msg.sender not in self.table:
                    log.warning("dropped %s from unknown node %d", msg.kind.name, msg.sender)
                    continue
                self._node_alive(msg.sender)
                if msg.kind == wire.Kind.HEARTBEAT and "round" in msg.meta:
                    reported = int(msg.meta["round"])
                    self.rounds[msg.sender] = reported
                    latest = max(self.rounds.values())
                    self.round_log.append((time.monotonic(), latest))
                    self.round_seen.setdefault(latest, time.monotonic())
                    if len(self.round_seen) > 16:
                        del self.round_seen[min(self.round_seen)]
                    if self.adaptation is not None:
                        self.adaptation.on_report(self.table[msg.sender].dc, msg.meta,
                                                  time.monotonic())
                    if self.round_gate:
                        self._open_round(reported)
                if msg.kind == wire.Kind.BARRIER:
                    self._on_barrier(msg)
                elif msg.kind == wire.Kind.BYE:
                    self._on_bye(msg)
                elif msg.kind == wire.Kind.ABORT:
                    raise ClusterAborted(f"{self.table.describe(msg.sender)} aborted: "
                                         f"{msg.meta.get('reason', '?')}")
                elif msg.kind != wire.Kind.HEARTBEAT:
                    log.warning("ignored unexpected %s from %s", msg.kind.name,
                                self.table.describe(msg.sender))
            self._check_liveness()
            self._adapt()

    def _adapt(self) -> None:
        if self.adaptation is None or not self.adaptation.due(time.monotonic()):
            return
        plan = self.adaptation.tick(self.policy, time.monotonic(),
                                    max(self.rounds.values(), default=0))
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
        if rnd > self.opened:
            before = self._policy_in_force()
            self.opened = rnd
            self._broadcast_servers(wire.Kind.ROUND_OPEN, {}, seq=rnd)
            now_in_force = self._policy_in_force()
            self.stats({"t": round(time.monotonic(), 3), "event": "round_open", "round": rnd,
                        "version": now_in_force.version})
            if self.adaptation is not None and now_in_force is not before:
                self._send_routes()             # relays for the trees now carrying chunks

    def _current_round(self) -> int:
        """The latest round open (round gate) or reported."""
        return self.opened if self.round_gate else max(self.rounds.values(), default=0)

    def _policy_in_force(self) -> Policy:
        """The policy of :meth:`_current_round`, as servers choose it."""
        return self.announced.for_round(self._current_round())

    def _send_routes(self) -> None:
        """Multipath relays (and the rates detours choose by) when they changed."""
        routes = self.adaptation.routes(self._policy_in_force())
        if routes is None:
            return
        self._broadcast_servers(wire.Kind.ROUTES, routes)
        self.stats({"t": round(time.monotonic(), 3), "event": "routes",
                    "relays": routes["relays"]})

    def rounds_ahead(self, lead_rounds: int) -> int:
        """The first round a policy announced now can safely start at, plus ``lead_rounds``
        - 1. Short rounds: the latest reported round plus the rounds the fastest DC may run
        before the announcement reaches it (reports are up to one heartbeat old; twice that
        plus a second, at the round rate of the last few seconds), plus one. Long rounds:
        :func:`scheduler.awareness.safe_start_round`, often the very next round."""
        latest = max(self.rounds.values(), default=0)
        now = time.monotonic()
        margin = 2 * self.config.heartbeat_s + 1.0
        window = [(t, r) for t, r in self.round_log if now - t <= 5.0]
        rate = 0.0
        if len(window) >= 2 and window[-1][0] > window[0][0]:
            rate = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])
        short = latest + math.ceil(rate * margin) + 1
        return max(short, safe_start_round(latest, self.round_seen, now, margin)) \
            + lead_rounds - 1

    def announce(self, trees, shares, lead_rounds: int = 3):
        """Send a new policy version to every server. With ``round_gate`` it is in force from
        the first round not yet open. Otherwise from :meth:`rounds_ahead`: ahead of time, so
        every DC switches at the same round boundary without a barrier; a server that gets
        it too late aborts the run with a clear error rather than disagree with the
        others."""
        # never before the previous version's start: a newer policy must not be shadowed
        ahead = self.opened + 1 if self.round_gate else self.rounds_ahead(lead_rounds)
        start = max(ahead, self.policy.start_round)
        self.policy = Policy(self.policy.version + 1, start, tuple(trees), tuple(shares))
        self.announced.add(self.policy)
        self.announced.drop_superseded(self._current_round())  # older ones never apply again
        for node in self.table.nodes.values():
            if node.role == SERVER:
                self.van.send(node.id, wire.Message(wire.Kind.POLICY,
                                                    meta={"policy": self.policy.to_json()}))
        log.info("announced policy %d from round %d%s", self.policy.version, start,
                 f" (round {self.opened} open)" if self.round_gate else "")
        return self.policy

    def run(self) -> int:
        try:
            self.rendezvous()
            self.serve()
        except ClusterAborted as exc:
            log.error("aborting the cluster: %s", exc)
            if self.table is not None:
                others = [n for n in self.table.nodes.values()
                          if n.role != SCHEDULER and n.id not in self.finished]
                self._abort_nodes(others, str(exc))
            return 1
        for node in self.table.nodes.values():
            if node.role == SERVER:
                self.van.send(node.id, wire.Message(wire.Kind.SHUTDOWN))
        log.info("all workers finished; servers told to shut down")
        return 0
