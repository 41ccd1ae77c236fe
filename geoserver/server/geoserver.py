"""One DC's server process: the local-server and global-server roles behind one socket.

The two roles are separate objects (:class:`~netstorm.geoserver.server.local_store.KeyStore` and
:class:`~netstorm.geoserver.server.aggregation.TreeExchange`) but share a process and a thread: the
DC's sum of a chunk passes from one to the other as a reference, with no extra hop or copy, and the
optimizer replica sits next to the sums it consumes. One loop, blocking on the socket with a
timeout equal to the heartbeat interval; a malformed or unexpected message is logged and
dropped, a bad request is answered with ERROR, and neither stops the server.

This class is wiring and dispatch: each kind goes to the handler its row of
:mod:`netstorm.geoserver.core.kinds` names (a dict built once); the WAN transport hands whole
chunks straight to the tree exchange, the local workers' requests wait or go on to the store
as :mod:`.worker_requests` decides (with the round gate, :mod:`.round_gate`), INITs spread
as :mod:`.init_spread` says, probes are :mod:`.probing`'s, and the settings come typed from
the scheduler's WELCOME (:mod:`netstorm.geoserver.config.settings`). O(1) per message
besides what its handler does.
"""
from __future__ import annotations

import importlib
import logging
import threading
import time

from . import native_plane
from .aggregation import TreeExchange
from ..compression.feedback import WanCodec
from .init_spread import InitSpread
from ..core.kinds import KINDS, handlers_for
from .local_store import KeyStore
from .esync import StepBalancer
from .mixed_sync import MixedExchange
from .probing import Probing
from .recovery import ServerRecovery
from .replies import Replies
from .replica_digest import ReplicaDigests
from ..core.nodes import SERVER, NodeInfo
from ..core.postoffice import AbortedByScheduler, AbortError, Postoffice
from ..core.ratelog import RateLimitedLog
from ..core.scheduler_watch import (SchedulerWatch, policies_in_use, report_meta,
                                   welcome_refusal)
from .round_gate import RoundGate
from .wan.link_keys import LinkKeys
from .wan.routing import MIN_SPLIT_BYTES
from .wan.transport import AWAY_S, RETAIN_BYTES, WanTransport
from ..config.settings import MAX_FRAME_BYTES, MAX_HELD_BYTES_PER_PEER, MAX_ROUNDS_AHEAD
from .worker_requests import WorkerRequests
from ..policy.tree import Policy, PolicyBook, PolicyError
from ..core.wire import Kind, Message

__all__ = ["DRAIN_MESSAGES", "GeoServer"]

log = logging.getLogger("netstorm.server")

DRAIN_MESSAGES = 16         # messages handled per wake-up when more already wait


class GeoServer:
    def __init__(self, postoffice: Postoffice, check_stop=lambda: None, resumed=None):
        """``check_stop``: called once a beat; raises to stop the server (a signal).
        ``resumed``: the :class:`~netstorm.geoserver.model.checkpoint.Checkpoint` to start from."""
        self.po = postoffice
        self._check_stop = check_stop
        self.table = postoffice.table
        self.dc = postoffice.me.dc
        self.settings = settings = postoffice.settings
        first = postoffice.welcome_policy   # None: it follows the start-up link measurement
        self.policies = PolicyBook(Policy.from_json(first, self.table.dcs, settings.min_dcs > 0)
                                   if first else None)
        self.servers = {dc: self.table.server_of(dc).id for dc in self.table.dcs}
        self.dc_of_server = {v: k for k, v in self.servers.items()}
        self.local_workers = {n.id for n in self.table.workers(self.dc)}
        # the compiled data plane where it is built and applies (docs/dataplane.md)
        module, why = native_plane.choose(settings)
        self.plane = None if module is None else native_plane.NativePlane(
            module, self.dc, self.table.dcs, self.servers, postoffice, settings,
            time.monotonic, MAX_ROUNDS_AHEAD, MAX_HELD_BYTES_PER_PEER, MIN_SPLIT_BYTES,
            RETAIN_BYTES, MAX_FRAME_BYTES)
        log.info("%s: data plane: %s", self.dc, "native" if self.plane else f"python ({why})")
        # links: the WAN the scheduler planned on (detours choose by its rates)
        self.wan = WanTransport(self.dc, self.servers, self.po, settings.rates(),
                                settings.chunk_bytes, settings.stall_s, time.monotonic,
                                settings.fuse_bytes,
                                outbox=self.plane and native_plane.NativeSendQueue(
                                    self.plane, postoffice.van))
        # bulk chunks sealed on a plain socket under per-link keys sent over CURVE
        self.links = LinkKeys(self.dc, self.table.dcs, self.servers, self.po, self.wan.send,
                              settings.chunk_bytes)
        self.probing = Probing(self.dc, [dc for dc in self.servers if dc != self.dc],
                               self.wan, self.po)
        codec = WanCodec(settings.compression, seed=self.po.me.id,
                         max_elements=max(1, settings.chunk_bytes // 4),
                         replayable=settings.server_restarts > 0) \
            if settings.compression.on else None
        self.exchange = TreeExchange(self.dc, self.policies, send=self.wan.send_chunk,
                                     deliver=self._deliver, codec=codec) \
            if self.plane is None else native_plane.NativeExchange(self.plane, self.policies)
        if self.plane is not None:
            self.plane.deliver, self.plane.route = self._deliver, self.wan.send_chunk
            self.plane.arrival, self.plane.handle = self.wan.monitor.on_arrival, self._handle
        self.wan.deliver_to(self.exchange.on_chunk)
        self.mixed = MixedExchange(self.dc, self.table.dcs, settings.sync.staleness,
                                   route=self._update_route, send=self._send_update,
                                   apply=self._compensated_step) \
            if settings.sync.asynchronous else None
        # esync: how many local steps each worker takes (measured here, slowest from the
        # scheduler)
        self.balancer = StepBalancer(settings.sync.max_steps) \
            if settings.sync.mode == "esync" else None
        self.stats = {"messages": 0, "dropped": 0, "fused": 0}
        self.replies = Replies(self.po, settings.fuse_bytes, self.balancer, self.stats)
        self.store = KeyStore(self.dc, self.local_workers, settings.chunk_bytes,
                              self.policies, reply=self.replies.send,
                              contribute=self.exchange.contribute,
                              forward_init=self._forward_init,
                              compressed_pushes=settings.compression.on
                              and settings.compression.scope == "all",
                              momentum_corrected=settings.compression.momentum > 0,
                              sync=settings.sync, mixed=self.mixed, resumed=resumed,
                              workers_per_dc={dc: len(self.table.workers(dc))
                                              for dc in self.table.dcs},
                              quorum_ready=self._quorum_ready
                              if settings.sync.quorum_in_force(len(self.table.dcs)) else None)
        # digests of the replica every audit_every rounds, for the scheduler to compare
        self.audit = ReplicaDigests(settings.audit_every, settings.sync)
        self.store.audit = self.audit if self.audit.on else None
        self.store.keep_applied = self.audit.on and settings.server_restarts > 0
        # replacing a lost DC server from a peer's replica (this one, or another DC's)
        self.recovery = ServerRecovery(self.dc, self.store, self.exchange, self.wan,
                                       self.policies, postoffice, self.table.dcs,
                                       replacing=postoffice.rejoined)
        self.recovery.elastic = settings.min_dcs > 0     # docs/recovery-elastic.md
        if postoffice.rejoined:     # the replica it copies may bring an optimizer: MXNet's
            threading.Thread(target=importlib.import_module, args=("mxnet",), daemon=True,
                             name="import-mxnet").start()       # import overlaps the copy
        self._departed: set = set()     # esync: workers (anywhere) that finished
        # round gate (adapt): a worker's push of a round not yet open waits there; asking
        # for the round is an early heartbeat, so a re-planned policy starts at the next round
        self.gate = RoundGate(settings.round_gate, settings.timeout_s)
        self.scheduler_id = self.table.scheduler().id
        # a silent scheduler: stop, or with scheduler_restarts await a new one (rebuild)
        self.scheduler_watch = SchedulerWatch(
            self.table.scheduler().address, settings.dead_after_s, settings.timeout_s,
            settings.scheduler_restarts, time.monotonic())
        self._drops = RateLimitedLog(log)
        self.inits = InitSpread(self.dc, self.store, self.policies, self.wan, settings.links,
                                self._drops)
        self.requests = WorkerRequests(self.dc, postoffice, self.store, self.policies,
                                       self.gate, self.recovery, settings, self.balancer,
                                       self._send_heartbeat, self._drops)
        self._handlers = handlers_for(SERVER, self)     # kind -> its handler (core/kinds.py)
        self.links.start()

    # ------------------------------------------------------------ callbacks
    def _deliver(self, key, chunk, rnd, total) -> None:
        """A chunk's total, from the exchange to the store (built after the exchange it
        contributes to)."""
        self.store.deliver(key, chunk, rnd, total)

    def _update_route(self, origin: str, dc: str) -> list:
        """mixed: where ``dc`` passes ``origin``'s updates on to: the origin sends its own
        to every other DC directly, nobody passes one on (each directed link carries each
        DC's update once a round, the least any route can; a tree would put several DCs'
        updates on its links)."""
        return [d for d in self.servers if d != origin] if dc == origin else []

    def _send_update(self, dc: str, key: int, rnd: int, origin: str, array) -> None:
        self.wan.send(dc, Message(Kind.UPDATE, key=key, seq=rnd, meta={"origin": origin},
                                  dtype=array.dtype, frames=[array]), (rnd, key, 0))

    def _compensated_step(self, key, grad, then):
        return self.store.compensated_step(key, grad, then)

    def _forward_init(self, entry, generation) -> None:
        """A local worker's initial value goes to every other DC (:mod:`.init_spread`; the
        store is built before the spreader)."""
        self.inits.forward(entry, generation)

    # ------------------------------------------------------------ handlers (core/kinds.py)
    def _on_request(self, msg: Message) -> None:
        """A local worker's request (INIT, PUSH, PULL, ...): it waits or goes on to the store
        (:mod:`.worker_requests`)."""
        self.requests.accept(msg)

    def _on_init(self, msg: Message) -> None:
        """A key's initial value: from a local worker, or passed on by another DC's server."""
        if msg.sender in self.local_workers:
            self.requests.accept(msg)
        else:
            self.inits.on_peer_init(self.dc_of_server[msg.sender], msg)

    def _on_chunk(self, msg: Message) -> None:
        """CHUNK_UP, CHUNK_DOWN, RELAY: whole chunks go on to the exchange."""
        self.wan.on_message(self.dc_of_server[msg.sender], msg)

    def _on_probe(self, msg: Message) -> None:
        self.probing.on_piece(self.dc_of_server[msg.sender], msg)

    def _on_probe_request(self, msg: Message) -> None:
        self.probing.on_request(msg)

    def _on_update(self, msg: Message) -> None:
        source = self.dc_of_server[msg.sender]
        if self.mixed is not None:
            self.store.on_update(msg, source)
        else:
            self._drops.log(source, "%s: ignored %s from server of %s", self.dc,
                            msg.kind.name, source)

    def _on_state_request(self, msg: Message) -> None:
        self.recovery.on_state_request(self.dc_of_server[msg.sender], msg)

    def _on_state(self, msg: Message) -> None:
        self.recovery.on_state(self.dc_of_server[msg.sender], msg)
        self.requests.recovered()

    def _on_recover(self, msg: Message) -> None:
        self.recovery.on_recover(msg)

    def _on_routes(self, msg: Message) -> None:
        self.wan.on_routes(msg.meta)

    def _on_heartbeat(self, msg: Message) -> None:
        """The scheduler's beat; under esync it carries the other DCs' slowest step."""
        if self.balancer is not None and "step_s" in msg.meta:
            self.balancer.cluster_slowest = float(msg.meta["step_s"])

    def _on_welcome(self, msg: Message) -> None:
        """A new scheduler took the cluster over (core/scheduler_watch.py): it answers
        the report this server re-registered with; the round gate asks it at once."""
        refusal = welcome_refusal(self.table, self.po.me.id, msg.meta)
        if refusal:
            self._drops.log(msg.sender, "%s: dropped %s", self.dc, refusal)
            return
        lost = self.scheduler_watch.lost
        self.scheduler_watch.back(time.monotonic())
        if not lost:        # a duplicate (it re-registered more than once): taken once
            return
        self.po.judge_scheduler()           # its deadline is learnt afresh
        log.warning("%s: a new scheduler took the cluster over; round %d", self.dc,
                    self.store.max_round)
        self._send_heartbeat()

    def _rebuild_report(self) -> dict:
        """What a new scheduler is told of this server (scheduler/rebuild.py): the policy
        versions it holds, its round, the round gate's state, each key's applied round.
        O(keys + policies)."""
        return report_meta(
            self.po.me, round=self.store.max_round, opened=self.gate.opened,
            policies=[p.to_json() for p in policies_in_use(self.policies,
                                                           self.store.max_round)],
            requested=self.gate.requested, workers=[
                n.to_json() for n in self.table.workers(self.dc)],
            keys=[[k, e.applied] for k, e in self.store.keys.items()])

    def _on_abort(self, msg: Message) -> None:
        raise AbortedByScheduler(msg.meta.get("reason", "the scheduler aborted the run"),
                                 left=bool(msg.meta.get("left")))

    def _on_policy(self, msg: Message) -> None:
        try:
            policy = Policy.from_json(msg.meta.get("policy", {}), self.table.dcs,
                                      self.settings.min_dcs > 0)
            self.policies.add(policy)
        except PolicyError as exc:
            log.error("%s: rejected policy from the scheduler: %s", self.dc, exc)
            return
        if self.store.max_round >= max(policy.start_round, 1):
            # this DC already started that round under another policy: DCs would disagree
            raise AbortError(f"policy {policy.version} for rounds from {policy.start_round} "
                             f"arrived at {self.dc} after it started round "
                             f"{self.store.max_round}; announce policies further ahead")
        log.info("%s: policy %d announced, in force from round %d (%d trees)", self.dc,
                 policy.version, policy.start_round, len(policy.trees))
        self.exchange.policy_added()
        self.requests.policy_known()
        for msg in self.inits.take_early():
            self._note_arrival(msg)
            self._on_init(msg)

    def _on_worker_left(self, msg: Message) -> None:
        """esync: a worker finished; the rounds after its last go on without it (other
        modes need every worker)."""
        if self.balancer is None:
            return
        rank = int(msg.meta["rank"])
        node = next((n for n in self.table.workers() if n.rank == rank), None)
        if node is None:
            log.error("%s: WORKER_LEFT names rank %d, which is no worker", self.dc, rank)
            return
        self._departed.add(node.id)
        everyone = len(self._departed) == len(self.table.workers())
        self.store.worker_left(node.id, {int(k): int(n) for k, n in msg.meta["pushes"]},
                               everyone)

    def _on_link_key(self, msg: Message) -> None:
        self.links.on_link_key(msg)

    def _on_link_key_done(self, msg: Message) -> None:
        self.links.on_link_key_done(msg)

    def _on_node_moved(self, msg: Message) -> None:
        """A worker of this DC rejoined (a new process in its rank, docs/recovery.md):
        reach it at its new address; its rounds go on where the lost one stopped. Or
        another DC's server was replaced: reach the new process."""
        moved = NodeInfo.from_json(msg.meta["node"])
        old = self.table.nodes.get(moved.id)
        if old is not None and old.role == SERVER and old.dc == moved.dc != self.dc:
            self.table.nodes[moved.id] = old.moved_to(moved)
            self.wan.moved(old.dc, old.id, self.po)
            self.links.moved(old.dc)
            log.info("%s: the server of %s is now at %s", self.dc, old.dc, moved.address)
            return
        if old is None or old.id not in self.local_workers or \
                (old.rank, old.local_rank) != (moved.rank, moved.local_rank):
            log.error("%s: ignored NODE_MOVED naming %s: no such worker here", self.dc,
                      moved.describe())
            return
        self.table.nodes[moved.id] = old.moved_to(moved)
        self.po.van.disconnect(moved.id)
        log.info("%s: %s rejoined at %s", self.dc, old.describe(), moved.address)

    def _on_replay(self, msg: Message) -> None:
        self.recovery.on_replay(msg)
        self.requests.open(int(msg.meta.get("opened", 0)))
        self.requests.recovered()

    def _on_round_open(self, msg: Message) -> None:
        self.requests.open(msg.seq)

    def _quorum_ready(self, wan_round: int, through: int) -> None:
        """Quorum rounds: this DC offers its DC rounds up to ``through`` for ``wan_round``
        (geoserver/server/quorum_rounds.py)."""
        self.po.send_scheduler(Message(Kind.QUORUM_READY, seq=wan_round,
                                       meta={"through": through}))

    def _on_quorum(self, msg: Message) -> None:
        """The scheduler decided which DCs WAN round ``seq`` completes with; a decision
        naming a DC not in the cluster, not matching what this DC offered, or sent without
        quorum rounds, is logged and dropped."""
        quorum = getattr(self.store.mode, "quorum", None)
        weights = msg.meta["weights"]
        problem = "no quorum rounds here" if quorum is None else \
            "no DC" if not weights else \
            ", ".join(f"unknown DC {dc!r}" for dc in weights if dc not in self.servers) or \
            quorum.refusal(msg.seq, weights)
        if problem:
            self._drops.log("quorum", "%s: dropped the quorum of round %d: %s", self.dc,
                            msg.seq, problem)
            return
        quorum.decided_round(msg.seq, weights)

    def _heartbeat_meta(self) -> dict:
        """This DC's round (with the round gate: the latest it asked for), its inbound link
        estimates ``{src: [Mbit/s, age s]}`` and the DCs its own messages are stuck towards
        (nothing left for ``stall_s``), and the model's bytes once its keys are known (the
        scheduler's cut bound, status page and metrics need them). O(keys)."""
        meta = {"round": max(self.store.max_round, self.gate.requested), **self.wan.report()}
        if self.balancer is not None:
            meta["step_s"] = self.balancer.slowest_here()
        model_bytes = self.store.model_bytes()
        if model_bytes:
            meta["model_bytes"] = model_bytes
        audited = self.audit.take()
        if audited:
            meta["audit"] = audited
        return meta

    def _send_heartbeat(self) -> None:
        self.po.send_scheduler(Message(Kind.HEARTBEAT, meta=self._heartbeat_meta()))

    def handle(self, msg: Message) -> bool:
        """Process one message and send the replies it made; False once the server should
        stop."""
        try:
            return self._handle(msg)
        finally:
            self.replies.flush()

    def _handle(self, msg: Message) -> bool:
        """:meth:`handle`, the small replies kept for :meth:`Replies.flush`. Handlers return
        None, or False when the server should stop."""
        self.stats["messages"] += 1
        if msg.sender == self.scheduler_id:       # admitted: it is the scheduler's key
            self.scheduler_watch.heard(time.monotonic())
        handler = self._handlers.get(msg.kind)
        if handler is None:
            self.stats["dropped"] += 1
            self._drops.log(msg.sender, "%s: dropped %s from %s: not expected from that node",
                            self.dc, msg.kind.name, self.table.describe(msg.sender))
            return True
        self._note_arrival(msg)
        return handler(msg) is not False

    def _note_arrival(self, msg: Message) -> None:
        """Another DC's message that the WAN transport does not time itself: its time on
        the link is no one else's."""
        source = self.dc_of_server.get(msg.sender)
        if source is not None and source != self.dc and not KINDS[msg.kind].timed_by_wan:
            self.wan.note_arrival(source, msg)

    def _on_shutdown(self, msg: Message) -> bool:
        log.info("%s: shutdown requested; %s; WAN chunks sent %s, %d of them in "
                 "BATCHes; compressed pushes %d; sum arrays reused %d, made %d", self.dc,
                 self.stats, self.exchange.sent, self.wan.outbox.fused,
                 self.store.compressed_received,
                 self.store.buffers.reused + self.exchange.buffers.reused,
                 self.store.buffers.made + self.exchange.buffers.made)
        if self.plane is not None:
            log.info("%s: data plane: %s", self.dc, self.plane.core.counters)
        if self.audit.on:
            log.info("%s: replica audit: %d digests sent, %d left out (hashing behind)",
                     self.dc, self.audit.sent, self.audit.skipped)
            self.audit.close()
        if self.gate.enabled:
            log.info("%s: round gate: %d rounds waited for the scheduler, %.3fs in all",
                     self.dc, self.gate.waits, self.gate.waited_s)
        if self.mixed is not None:
            log.info("%s: mixed: largest staleness applied %d rounds; %d rounds of a "
                     "key waited for a slower DC", self.dc, self.mixed.staleness_seen,
                     self.mixed.waits)
        quorum = getattr(self.store.mode, "quorum", None)
        if quorum is not None:
            log.info("%s: quorum rounds: left out of %d WAN rounds, %d contributions merged "
                     "late rounds, %d rounds pushed here were never merged (the run ended "
                     "before a WAN round took them)", self.dc, quorum.left_out, quorum.merged,
                     quorum.unmerged())
        return False

    def serve(self) -> None:
        """Run until SHUTDOWN; raise :class:`AbortError` if the scheduler aborts the run."""
        for msg in self.po.take_early():
            if not self.handle(msg):
                return
        looping = self.plane is not None and not self.plane.socket_free     # tests: no loop
        if looping:
            for msg in self.po.van.take_received():     # (the Van's own receiving stops)
                if self.po.admit(msg) and not self.handle(msg):
                    return
        next_beat = 0.0
        looked = time.monotonic()         # when the server last looked at its sockets
        while True:
            now = time.monotonic()
            if now >= next_beat:   # round and link rates ride on the heartbeat
                self._check_stop()
                # stalls and idle links change on the scale of seconds: look once a beat,
                # not once a message
                self.wan.acknowledged(self.store.acknowledged_round())
                self.wan.check_stalls()
                if self.settings.probe_idle_s and not self.policies.empty:
                    self.wan.probe_idle(self.settings.probe_idle_s)
                overdue = self.gate.overdue(now)
                if overdue:
                    raise AbortError(f"{self.dc}: {overdue}")
                watch = self.scheduler_watch    # closed, or silent (core/postoffice.py)
                gone = watch.check(now, "" if watch.lost else self.po.scheduler_verdict(now))
                if gone:
                    raise AbortError(f"{self.dc}: {gone}")
                if watch.lost:                  # the data path goes on meanwhile
                    self.po.reregister(self._rebuild_report())
                self._send_heartbeat()
                next_beat = now + self.settings.heartbeat_s
            self.replies.flush()            # nothing waits while the server does
            if looping:
                if not self._run_plane(next_beat):
                    return
                continue
            away = time.monotonic() - looked
            readable, writable = self.po.wait(max(0.0, next_beat - now), self.wan.backlogged())
            looked = time.monotonic()
            self.wan.flush(writable, away)
            try:
                self.requests.take_built_optimizer()    # at the latest a beat after it
                if not self._drain(readable, next_beat):
                    return
            finally:
                self.replies.flush()        # what this drain made, fused per worker
            self.probing.maybe_report()       # a measurement's timeout also ends it

    def _run_plane(self, next_beat: float) -> bool:
        """One turn of the compiled data plane until the next beat at the latest; False
        once the server should stop."""
        now = time.monotonic()
        if now - self.plane.returned >= AWAY_S:     # handling what the core handed over
            self.wan.outbox.paused()                # took long: a link may have drained
        for dc in self.servers:             # whole chunks to relayed or stalled links: Python
            if dc != self.dc:
                self.plane.core.set_route(self.plane.index[dc],
                                          self.wan.router.is_stalled(dc, now),
                                          bool(self.wan.router.relays.get(dc)))
        try:
            ok = self.plane.run(max(0.0, next_beat - now))
            self.requests.take_built_optimizer()    # at the latest a beat after it
        finally:
            self.replies.flush()
        self.probing.maybe_report()
        return ok

    def _drain(self, readable: bool, next_beat: float) -> bool:
        """Handle up to :data:`DRAIN_MESSAGES` that already wait, without a poll each
        (links with room get their next chunk in between); False once the server should
        stop."""
        for handled in range(DRAIN_MESSAGES if readable else 0):
            if handled and (not self.po.van.pending() or time.monotonic() >= next_beat):
                break
            if handled:
                self.wan.flush(self.wan.backlogged())
            msg = self.po.recv(0)
            if msg is None:
                break
            if not self._handle(msg):
                return False
        return True
