"""One DC's server process: the local-server and global-server roles behind one socket.

The two roles are separate objects (:class:`~netstorm.geoserver.local_store.KeyStore` and
:class:`~netstorm.geoserver.aggregation.TreeExchange`) but share a process and a thread: the
DC's sum of a chunk passes from one to the other as a reference, with no extra hop or copy, and the
optimizer replica sits next to the sums it consumes. One loop, blocking on the socket with a
timeout equal to the heartbeat interval; a malformed or unexpected message is logged and
dropped, a bad request is answered with ERROR, and neither stops the server.

This class is wiring and dispatch: the WAN transport hands whole chunks straight to the tree
exchange, the round gate (:mod:`netstorm.geoserver.round_gate`) decides which pushes wait, and the
settings come typed from the scheduler's WELCOME (:mod:`netstorm.geoserver.settings`).
"""
from __future__ import annotations

import dataclasses
import importlib
import logging
import threading
import time

from ..core import wire
from .aggregation import TreeExchange
from ..core.batch import MAX_MESSAGES, pack
from ..compression.feedback import WanCodec
from .local_store import KeyStore, RequestError
from .esync import StepBalancer
from .mixed_sync import MixedExchange
from ..model.optimizer_host import build_in_background
from .wan.probe import LinkProber
from .recovery import ServerRecovery
from ..core.nodes import SERVER, WORKER, NodeInfo
from ..core.postoffice import AbortedByScheduler, AbortError, Postoffice
from ..core.ratelog import RateLimitedLog
from .round_gate import RoundGate
from ..config.settings import MAX_EARLY_MESSAGES, MAX_ROUNDS_AHEAD, ProbeRequest, SettingsError
from .wan.transport import WanTransport
from ..policy.tree import Policy, PolicyBook, PolicyError, widest_children
from ..core.wire import Kind, Message

__all__ = ["GeoServer"]

log = logging.getLogger("netstorm.server")

DRAIN_MESSAGES = 16         # messages handled per wake-up when more already wait
TIMED_BY_WAN = {Kind.PROBE, Kind.CHUNK_UP, Kind.CHUNK_DOWN, Kind.RELAY}   # the rest: here
WORKER_REQUESTS = {Kind.INIT, Kind.PUSH, Kind.PULL, Kind.SET_OPTIMIZER, Kind.SAVE_STATES,
                   Kind.LOAD_STATES, Kind.RESUME}


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
        self.policies = PolicyBook(Policy.from_json(first, self.table.dcs) if first else None)
        self._before_policy: list = []  # worker requests that came before the first policy
        self._early_inits: list = []    # other DCs' INITs that came before it
        self._building = None           # (SET_OPTIMIZER, future optimizer) while built
        self._before_optimizer: list = []   # worker requests that came meanwhile
        self.servers = {dc: self.table.server_of(dc).id for dc in self.table.dcs}
        self.dc_of_server = {v: k for k, v in self.servers.items()}
        self.local_workers = {n.id for n in self.table.workers(self.dc)}
        # links: the WAN the scheduler planned on (detours choose by its rates)
        self.wan = WanTransport(self.dc, self.servers, self.po, settings.rates(),
                                settings.chunk_bytes, settings.stall_s, time.monotonic,
                                settings.fuse_bytes)
        self.prober = LinkProber(tuple(dc for dc in self.servers if dc != self.dc))
        codec = WanCodec(settings.compression, seed=self.po.me.id,
                         max_elements=max(1, settings.chunk_bytes // 4)) \
            if settings.compression.on else None
        self.exchange = TreeExchange(self.dc, self.policies, send=self.wan.send_chunk,
                                     deliver=self._deliver, codec=codec)
        self.wan.deliver_to(self.exchange.on_chunk)
        self.mixed = MixedExchange(self.dc, self.table.dcs, settings.sync.staleness,
                                   route=self._update_route, send=self._send_update,
                                   apply=self._compensated_step) \
            if settings.sync.asynchronous else None
        # esync: how many local steps each worker takes (measured here, slowest from the
        # scheduler)
        self.balancer = StepBalancer(settings.sync.max_steps) \
            if settings.sync.mode == "esync" else None
        self.store = KeyStore(self.dc, self.local_workers, settings.chunk_bytes,
                              self.policies, reply=self._reply_worker,
                              contribute=self.exchange.contribute,
                              forward_init=self._forward_init,
                              compressed_pushes=settings.compression.on
                              and settings.compression.scope == "all",
                              momentum_corrected=settings.compression.momentum > 0,
                              sync=settings.sync, mixed=self.mixed, resumed=resumed)
        # replacing a lost DC server from a peer's replica (this one, or another DC's)
        self.recovery = ServerRecovery(self.dc, self.store, self.exchange, self.wan,
                                       self.policies, postoffice, self.table.dcs,
                                       replacing=postoffice.rejoined)
        if postoffice.rejoined:     # the replica it copies may bring an optimizer: MXNet's
            threading.Thread(target=importlib.import_module, args=("mxnet",), daemon=True,
                             name="import-mxnet").start()       # import overlaps the copy
        self.stats = {"messages": 0, "dropped": 0, "fused": 0}
        self._fuse_bytes = settings.fuse_bytes
        self._replies: dict = {}        # worker -> small VALUEs to send together
        self._departed: set = set()     # esync: workers (anywhere) that finished
        # round gate (adapt): a worker's push of a round not yet open waits there; asking
        # for the round is an early heartbeat, so a re-planned policy starts at the next round
        self.gate = RoundGate(settings.round_gate, settings.timeout_s)
        self.scheduler_id = self.table.scheduler().id
        self._scheduler_seen = time.monotonic()     # the WELCOME just came
        self._drops = RateLimitedLog(log)

    # ------------------------------------------------------------ callbacks
    def _deliver(self, key, chunk, rnd, total) -> None:
        """A chunk's total, from the exchange to the store (built after the exchange it
        contributes to)."""
        self.store.deliver(key, chunk, rnd, total)

    def _reply_worker(self, worker: int, msg: Message) -> None:
        """A reply to a local worker; under esync a value carries the worker's local steps
        until the next round. A small VALUE waits for the others the message being handled
        makes, to go with them in one BATCH (:meth:`_send_replies`)."""
        if self.balancer is not None and msg.kind == Kind.VALUE:
            msg.meta = {"steps": self.balancer.steps(worker, msg.seq)}
            self.balancer.on_reply(worker, msg.seq, time.monotonic())
        if msg.kind == Kind.VALUE and self._fuse_bytes and \
                wire.payload_bytes(msg) < self._fuse_bytes:
            self._replies.setdefault(worker, []).append(msg)
            return
        self._send_replies(worker)          # in the order they were made
        self.po.send(worker, msg)

    def _send_replies(self, worker=None) -> None:
        """Send the VALUEs that wait for ``worker`` (None: for every worker), several in a
        BATCH. O(replies)."""
        for who in list(self._replies) if worker is None else [worker]:
            replies = self._replies.pop(who, ())
            for first in range(0, len(replies), MAX_MESSAGES):
                part = replies[first:first + MAX_MESSAGES]
                self.po.send(who, part[0] if len(part) == 1 else pack(part))
                self.stats["fused"] += len(part) if len(part) > 1 else 0

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
        """A local worker's initial value goes to every other DC once, each DC passing it
        on to the next: along the widest paths out of its origin when the WAN's links are
        known (``settings.links``), else along the first tree of the first policy (its
        links taken undirected); over those links only, once per link, instead of from
        this DC to every other."""
        self._spread_init(Message(Kind.INIT, key=entry.key, seq=generation,
                                  flags=wire.Flag.HAS_VALUE,
                                  meta={"shape": list(entry.shape), "dtype": entry.dtype.str,
                                        "origin": self.dc,
                                        **({"stype": "row_sparse"} if entry.sparse else {})},
                                  dtype=entry.dtype, frames=[entry.value]))

    def _spread_init(self, msg: Message) -> None:
        origin = str(msg.meta.get("origin"))
        try:
            children = widest_children(origin, self.dc, self.settings.links) \
                if self.settings.links else \
                self.policies.for_round(0).trees[0].children_from(origin, self.dc)
        except PolicyError as exc:
            log.error("%s: cannot pass on INIT of key %d: %s", self.dc, msg.key, exc)
            return
        for dc in children:           # a copy per child: the Van stamps its sender on it
            self.wan.send(dc, dataclasses.replace(msg))     # ahead of any chunk

    # ------------------------------------------------------------ dispatch
    def _from_worker(self, msg: Message) -> None:
        handler = {Kind.INIT: self.store.on_init, Kind.PUSH: self.store.on_push,
                   Kind.PULL: self.store.on_pull, Kind.SET_OPTIMIZER: self._on_set_optimizer,
                   Kind.SAVE_STATES: self.store.on_save_states,
                   Kind.LOAD_STATES: self.store.on_load_states,
                   Kind.RESUME: self.store.on_resume}[msg.kind]
        try:
            handler(msg)
        except (RequestError, wire.WireError) as exc:
            self._reject(msg, str(exc))

    def _on_set_optimizer(self, msg: Message) -> None:
        """A new optimizer is built on a thread of its own: that imports MXNet, a second or
        more (longer under load), and this loop must go on beating and reading the
        scheduler's beats meanwhile, or either side takes the other for dead. The local
        workers' requests wait for it (:meth:`_optimizer_built`)."""
        if self.store.optimizer_wanted(msg):
            self._building = msg, build_in_background(self.store.build_optimizer,
                                                      msg.meta.get("spec"))
        else:
            self.store.on_set_optimizer(msg)        # the one in place: answered at once

    def _optimizer_built(self) -> None:
        """The store takes the optimizer built off the loop (a failure to build it is
        answered with ERROR, as in place); then the requests that waited for it, in order."""
        (msg, future), self._building = self._building, None
        try:
            self.store.on_set_optimizer(msg, build=lambda spec: future.result())
        except RequestError as exc:
            self._reject(msg, str(exc))
        waiting, self._before_optimizer = self._before_optimizer, []
        for request in waiting:
            self._accept_worker(request)

    def _reject(self, msg: Message, reason: str) -> None:
        """Answer a local worker's request with ERROR (logged, rate-limited per worker)."""
        self._drops.log(msg.sender, "%s: rejected %s of key %d from %s: %s", self.dc,
                        msg.kind.name, msg.key, self.table.describe(msg.sender), reason)
        self.po.send(msg.sender, Message(Kind.ERROR, key=msg.key, request=msg.request,
                                         meta={"reason": reason}))

    def _from_server(self, msg: Message) -> None:
        source = self.dc_of_server[msg.sender]
        if msg.kind not in TIMED_BY_WAN:
            self.wan.note_arrival(source, msg)      # its time on the link is no one else's
        if msg.kind == Kind.INIT:
            if self.policies.empty:                 # the way on depends on the first policy
                if len(self._early_inits) < MAX_EARLY_MESSAGES:
                    self._early_inits.append(msg)
                else:
                    self._drops.log(source, "%s: dropped INIT of key %d from %s: %d INITs "
                                    "already wait for the first policy", self.dc, msg.key,
                                    source, MAX_EARLY_MESSAGES)
                return
            try:
                self.store.on_init(msg)
            except (RequestError, wire.WireError) as exc:
                log.error("%s: bad INIT of key %d from %s: %s", self.dc, msg.key, source, exc)
                return
            self._spread_init(msg)
            return
        if msg.kind == Kind.PROBE:
            now = time.monotonic()
            self.prober.on_piece(source, sum(len(f) for f in msg.frames), now)   # start-up
            self.wan.on_probe(source, msg, now)                 # and passive measurement
            self._maybe_report_probe()
        elif msg.kind in (Kind.CHUNK_UP, Kind.CHUNK_DOWN, Kind.RELAY):
            self.wan.on_message(source, msg)        # whole chunks go on to the exchange
        elif msg.kind == Kind.UPDATE and self.mixed is not None:
            self.store.on_update(msg, source)
        elif msg.kind == Kind.STATE_REQUEST:
            self.recovery.on_state_request(source, msg)
        elif msg.kind == Kind.STATE:
            self.recovery.on_state(source, msg)
            self._after_recovery()
        else:
            self._drops.log(source, "%s: ignored %s from server of %s", self.dc,
                            msg.kind.name, source)

    def _on_probe_request(self, msg: Message) -> None:
        """Stream probe pieces to every other DC at once and time what arrives here."""
        try:
            request = ProbeRequest.from_json(msg.meta)
        except SettingsError as exc:
            raise AbortError(f"{self.dc}: bad PROBE_REQUEST from the scheduler: {exc}") from exc
        self.prober.start(time.monotonic(), request.timeout_s)
        for piece in LinkProber.pieces(request.probe_bytes):   # interleaved: all flows
            for dc in self.prober.peers:                        # run together
                self.wan.send(dc, Message(Kind.PROBE, dtype=piece.dtype, frames=[piece]))
        self._maybe_report_probe()

    def _maybe_report_probe(self) -> None:
        rates = self.prober.take_report(time.monotonic())
        if rates is not None:
            log.info("%s: measured inbound rates (Mbit/s): %s", self.dc,
                     {k: round(v, 1) for k, v in rates.items()})
            self.po.send_scheduler(Message(Kind.PROBE_REPORT, meta={"rates": rates}))

    def _on_policy(self, msg: Message) -> None:
        try:
            policy = Policy.from_json(msg.meta.get("policy", {}), self.table.dcs)
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
        waiting, self._before_policy = self._before_policy, []
        for request in waiting:
            self._accept_worker(request)
        early, self._early_inits = self._early_inits, []
        for msg in early:
            self._from_server(msg)

    def _accept_worker(self, msg: Message) -> None:
        """A local worker's request: held while an optimizer is being built, its round is
        not open (asking for a new round at once) or no policy is known yet, else handled.
        The replacement of a lost server keeps them until it recovered (docs/recovery.md)."""
        if not self.recovery.take(msg):
            return
        if self._building is not None:      # they may need it (a push's round applies it)
            if len(self._before_optimizer) < MAX_EARLY_MESSAGES:
                self._before_optimizer.append(msg)
            else:
                self._reject(msg, f"{MAX_EARLY_MESSAGES} requests already wait for the "
                                  f"optimizer to be built")
            return
        wan_round = self.settings.sync.wan_round(msg.seq)
        if msg.kind == Kind.PUSH and self.balancer is not None:
            self.balancer.on_push(msg.sender, msg.seq, time.monotonic())
        if msg.kind == Kind.PUSH and self.gate.closed(wan_round):
            current = max(self.store.max_round, self.gate.requested)
            if wan_round > current + MAX_ROUNDS_AHEAD:    # never asked of the scheduler
                self._reject(msg, f"push of round {msg.seq} is more than {MAX_ROUNDS_AHEAD} "
                                  f"rounds ahead of this DC's round {current}")
            elif self.gate.hold(wan_round, msg, time.monotonic()):
                self._send_heartbeat()
        elif msg.kind == Kind.PUSH and not self.policies.empty and \
                self.gate.passed(wan_round):
            self._send_heartbeat()                  # the next round, a round ahead
            self._from_worker(msg)
        elif self.policies.empty:
            if len(self._before_policy) < MAX_EARLY_MESSAGES:
                self._before_policy.append(msg)
            else:
                self._reject(msg, f"{MAX_EARLY_MESSAGES} requests already wait for the "
                                  f"first policy")
        else:
            self._from_worker(msg)

    def _on_worker_left(self, msg: Message) -> None:
        """esync: a worker finished; the rounds after its last go on without it."""
        rank = int(msg.meta["rank"])
        node = next((n for n in self.table.workers() if n.rank == rank), None)
        if node is None:
            log.error("%s: WORKER_LEFT names rank %d, which is no worker", self.dc, rank)
            return
        self._departed.add(node.id)
        everyone = len(self._departed) == len(self.table.workers())
        self.store.worker_left(node.id, {int(k): int(n) for k, n in msg.meta["pushes"]},
                               everyone)

    def _on_node_moved(self, msg: Message) -> None:
        """A worker of this DC rejoined (a new process in its rank, docs/recovery.md):
        reach it at its new address; its rounds go on where the lost one stopped. Or
        another DC's server was replaced: reach the new process."""
        moved = NodeInfo.from_json(msg.meta["node"])
        old = self.table.nodes.get(moved.id)
        if old is not None and old.role == SERVER and old.dc == moved.dc != self.dc:
            self.table.nodes[moved.id] = old.moved_to(moved)
            self.wan.moved(old.dc, old.id, self.po)
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
        for request in self.gate.open(int(msg.meta.get("opened", 0)), time.monotonic()):
            self._accept_worker(request)
        self._after_recovery()

    def _after_recovery(self) -> None:
        """Once recovered, the replacement takes the requests its workers sent meanwhile."""
        if not self.recovery.active:
            for request in self.recovery.release():
                self._accept_worker(request)

    def _on_round_open(self, msg: Message) -> None:
        for request in self.gate.open(msg.seq, time.monotonic()):
            self._accept_worker(request)

    def _heartbeat_meta(self) -> dict:
        """This DC's round (with the round gate: the latest it asked for), its inbound link
        estimates ``{src: [Mbit/s, age s]}`` and the DCs its own messages are stuck towards
        (nothing left for ``stall_s``)."""
        meta = {"round": max(self.store.max_round, self.gate.requested), **self.wan.report()}
        if self.balancer is not None:
            meta["step_s"] = self.balancer.slowest_here()
        return meta

    def _send_heartbeat(self) -> None:
        self.po.send_scheduler(Message(Kind.HEARTBEAT, meta=self._heartbeat_meta()))

    def handle(self, msg: Message) -> bool:
        """Process one message and send the replies it made; False once the server should
        stop."""
        try:
            return self._handle(msg)
        finally:
            self._send_replies()

    def _handle(self, msg: Message) -> bool:
        """:meth:`handle`, the small replies kept for :meth:`_send_replies`."""
        self.stats["messages"] += 1
        if msg.sender == self.scheduler_id:       # admitted: it is the scheduler's key
            self._scheduler_seen = time.monotonic()
            if msg.kind == Kind.HEARTBEAT:
                if self.balancer is not None and "step_s" in msg.meta:
                    self.balancer.cluster_slowest = float(msg.meta["step_s"])
                return True
        if msg.kind == Kind.SHUTDOWN and msg.sender == self.scheduler_id:
            log.info("%s: shutdown requested; %s; WAN chunks sent %s, %d of them in "
                     "BATCHes; compressed pushes %d; sum arrays reused %d, made %d", self.dc,
                     self.stats, self.exchange.sent, self.wan.outbox.fused,
                     self.store.compressed_received,
                     self.store.buffers.reused + self.exchange.buffers.reused,
                     self.store.buffers.made + self.exchange.buffers.made)
            if self.gate.enabled:
                log.info("%s: round gate: %d rounds waited for the scheduler, %.3fs in all",
                         self.dc, self.gate.waits, self.gate.waited_s)
            if self.mixed is not None:
                log.info("%s: mixed: largest staleness applied %d rounds; %d rounds of a "
                         "key waited for a slower DC", self.dc, self.mixed.staleness_seen,
                         self.mixed.waits)
            return False
        if msg.kind == Kind.ABORT:
            raise AbortedByScheduler(msg.meta.get("reason", "the scheduler aborted the run"))
        if msg.kind == Kind.POLICY and msg.sender == self.scheduler_id:
            self._on_policy(msg)
            return True
        if msg.kind == Kind.ROUTES and msg.sender == self.scheduler_id:
            self.wan.on_routes(msg.meta)
            return True
        if msg.kind == Kind.WORKER_LEFT and msg.sender == self.scheduler_id:
            if self.balancer is not None:   # esync only: other modes need every worker
                self._on_worker_left(msg)
            return True
        if msg.kind == Kind.ROUND_OPEN and msg.sender == self.scheduler_id:
            self._on_round_open(msg)
            return True
        if msg.kind == Kind.NODE_MOVED and msg.sender == self.scheduler_id:
            self._on_node_moved(msg)
            return True
        if msg.kind == Kind.RECOVER and msg.sender == self.scheduler_id:
            self.recovery.on_recover(msg)
            return True
        if msg.kind == Kind.REPLAY and msg.sender == self.scheduler_id:
            self._on_replay(msg)
            return True
        if msg.kind == Kind.PROBE_REQUEST and msg.sender == self.scheduler_id:
            self._on_probe_request(msg)
            return True
        sender = self.table.nodes.get(msg.sender)
        if sender is None:
            self.stats["dropped"] += 1
            self._drops.log(msg.sender, "%s: dropped %s from unknown node %d", self.dc,
                            msg.kind.name, msg.sender)
        elif sender.role == WORKER and msg.sender in self.local_workers \
                and msg.kind in WORKER_REQUESTS:
            self._accept_worker(msg)
        elif sender.role == SERVER and msg.sender != self.po.me.id:
            self._from_server(msg)
        else:
            self.stats["dropped"] += 1
            self._drops.log(msg.sender, "%s: dropped %s from %s: not expected from that node",
                            self.dc, msg.kind.name, sender.describe())
        return True

    def serve(self) -> None:
        """Run until SHUTDOWN; raise :class:`AbortError` if the scheduler aborts the run."""
        for msg in self.po.take_early():
            if not self.handle(msg):
                return
        next_beat = 0.0
        looked = time.monotonic()         # when the server last looked at its sockets
        while True:
            now = time.monotonic()
            if now >= next_beat:   # round and link rates ride on the heartbeat
                self._check_stop()
                # stalls and idle links change on the scale of seconds: look once a beat,
                # not once a message
                self.wan.check_stalls()
                if self.settings.probe_idle_s and not self.policies.empty:
                    self.wan.probe_idle(self.settings.probe_idle_s)
                overdue = self.gate.overdue(now)
                if overdue:
                    raise AbortError(f"{self.dc}: {overdue}")
                silent = now - self._scheduler_seen
                # a message waiting may be a beat of the scheduler's that queued up while
                # this loop was busy (a long handler): it is read first, judged next beat
                if silent > self.settings.dead_after_s and not self.po.van.pending():
                    raise AbortError(f"{self.dc}: the scheduler at "
                                     f"{self.table.scheduler().address} sent nothing for "
                                     f"{silent:.1f}s (dead_after_s="
                                     f"{self.settings.dead_after_s:g}); it is presumed dead")
                self._send_heartbeat()
                next_beat = now + self.settings.heartbeat_s
            self._send_replies()            # nothing waits while the server does
            away = time.monotonic() - looked
            readable, writable = self.po.wait(max(0.0, next_beat - now), self.wan.backlogged())
            looked = time.monotonic()
            self.wan.flush(writable, away)
            try:
                if self._building is not None and self._building[1].done():
                    self._optimizer_built()     # at the latest a beat after it was built
                if not self._drain(readable, next_beat):
                    return
            finally:
                self._send_replies()        # what this drain made, fused per worker
            self._maybe_report_probe()        # a measurement's timeout also ends it

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
