"""A DC server's part in replacing a lost DC server from a peer's replica (docs/recovery.md).

The scheduler drives it in three steps:

1. ``RECOVER`` (to the surviving servers): freeze. Nothing more goes to the WAN, every
   partial sum and every queued chunk of the rounds in flight is dropped (they named policy
   versions older than the replay policy's, which every DC now refuses), and each key's
   applied round and value digest go to the scheduler (``STATE_REPORT``). Applying stops by
   itself: a total needs chunks, and none of the old versions is taken any more.
2. ``REPLAY`` (to every server, the replacement too): for every key, the round it restarts
   from (the most any surviving DC applied), a DC that holds it there and its digest, and
   the replay policy, in force from the earliest such round on. A DC behind on a key (and
   the replacement, on every key) asks that DC for its replica (``STATE_REQUEST``) and
   checks the ``STATE`` it gets against the planned round and digest
   (:mod:`netstorm.geoserver.server.replica`). A holder answers only such planned requests, once
   per key; any other ``STATE_REQUEST``, and a ``STATE`` no outstanding request asked
   for, is dropped and logged (any DC can send one at any time).
3. Once every key is at its round, the rounds after it go to the WAN again under the replay
   policy (the local sums of the DC's workers' pushes were kept; the replacement's workers
   send theirs again after a ``RESUME``), and the scheduler hears ``RECOVERED``.

No round is applied twice or lost: a key's rounds up to its planned round are in every
replica (a DC behind copies a DC that applied it, whose total included every DC's
contribution), and every round after it is summed again from the DCs' kept sums, exactly
once, under one policy version.

The replacement takes no worker request until step 3 is done, and none from a worker that
has not yet asked where to resume (``RESUME``): an earlier one was sent to the lost process.
"""
from __future__ import annotations

import logging
import time

from . import replica
from .local_store import RequestError
from ..core.postoffice import AbortError
from ..policy.tree import Policy, PolicyError
from ..core.wire import Kind, Message
from ..core.ratelog import RateLimitedLog

__all__ = ["ServerRecovery"]

log = logging.getLogger("netstorm.server")


class ServerRecovery:
    def __init__(self, dc: str, store, exchange, wan, policies, postoffice, dcs,
                 replacing: bool):
        """``replacing``: this process replaces the lost server of ``dc``."""
        self.dc, self.store, self.exchange, self.wan = dc, store, exchange, wan
        self.policies, self.po, self.dcs = policies, postoffice, dcs
        self.replacing = replacing
        self.active = replacing         # from RECOVER (or start) until every key is back
        self.rounds: dict = {}          # key -> the round it restarts from
        self.awaiting: dict = {}        # key -> (round, digest, DC asked) of replicas to come
        self.held: list = []            # replacement: worker requests until recovered
        self.resumed: set = set()       # replacement: workers that asked where to resume
        self.planless = replacing       # frozen (or replacing), the REPLAY not here yet
        self.owed: dict = {}            # DC -> keys the plan has it copy from here, once
        self.early: dict = {}           # DC -> its STATE_REQUEST that came before the REPLAY
        self.started = time.monotonic()
        self.version = None             # the replay policy's version of this recovery: its
                                        # STATE_REQUESTs and STATEs carry it
        self.recovered_once = False     # replacing: it was back once (then a survivor)
        self._drops = RateLimitedLog(log)   # replica messages no recovery here asked for
        self.elastic = False            # [elastic]: a replay policy may span fewer DCs

    # ------------------------------------------------------------ worker requests
    def take(self, msg: Message) -> bool:
        """Whether the server handles a local worker's request now; False: kept (until
        recovered) or dropped (sent to the lost process)."""
        if not self.replacing:
            return True
        if msg.kind == Kind.RESUME:
            self.resumed.add(msg.sender)
        elif msg.sender not in self.resumed:
            log.info("%s: dropped %s of key %d from node %d, sent before it resumed here",
                     self.dc, msg.kind.name, msg.key, msg.sender)
            return False
        if self.active:
            self.held.append(msg)
            return False
        return True

    # ------------------------------------------------------------ the three steps
    def on_recover(self, msg: Message) -> None:
        version = int(msg.meta["version"])
        change = {"joins": "the server of {} joins the run",
                  "leaves": "the server of {} leaves the run"}.get(msg.meta.get("change"))
        what = change.format(msg.meta["dc"]) if change else \
            f"the replica of {msg.meta['dc']} is being replaced from the majority's " \
            f"(replica audit)" if msg.meta.get("repair") else \
            f"the server of {msg.meta['dc']} is being replaced"
        log.warning("%s: %s: freezing; chunks of policies before %d are dropped", self.dc,
                    what, version)
        self.active, self.started = True, time.monotonic()
        self.planless, self.owed, self.early = True, {}, {}
        self.awaiting, self.version = {}, version    # a recovery restarted: a new plan
        self.store.replicas.freeze()
        self.exchange.restart(version)
        dropped = self.wan.forget_before(version)
        keys = self.store.replicas.report()
        log.info("%s: %d stale chunk messages dropped; reporting %d keys", self.dc, dropped,
                 len(keys))
        self.po.send_scheduler(Message(Kind.STATE_REPORT, meta={"keys": keys}))

    def on_replay(self, msg: Message) -> None:
        try:
            policy = Policy.from_json(msg.meta["policy"], self.dcs, self.elastic)
            self.exchange.restart(policy.version)
            self.policies.replay(policy)
        except PolicyError as exc:
            raise AbortError(f"{self.dc}: bad REPLAY from the scheduler: {exc}") from exc
        self.rounds, asks, self.owed, self.planless = {}, {}, {}, False
        self.awaiting, self.version = {}, policy.version
        for key, rnd, holders, want in msg.meta["keys"]:
            self.rounds[key] = rnd
            if self.dc in holders:          # the DCs behind on it may copy it from here
                for dc in set(self.dcs) - set(holders):
                    self.owed.setdefault(dc, set()).add(key)
            applied = self.store.replicas.applied(key)
            if applied > rnd and self.replacing and not self.recovered_once:
                applied = -1        # copied in a recovery restarted since: copied again
            if applied == rnd + 1 and self.dc not in holders and \
                    self.store.replicas.undo_last(key, rnd):    # an odd replica ahead
                applied = rnd                   # (docs/recovery.md, replica audit)
            if applied > rnd:
                raise AbortError(f"{self.dc}: REPLAY puts key {key} back at round {rnd}, "
                                 f"this DC applied {applied}")
            if applied < rnd or self.dc not in holders:     # behind, or an odd replica
                source = self._source(holders, asks)     # (docs/recovery-audit.md)
                self.awaiting[key] = (rnd, want, source)
                asks.setdefault(source, []).append(key)
        self._rollback_residuals()
        self.exchange.forget_after(self.rounds)
        self.exchange.policy_added()
        log.info("%s: replay policy %d from round %d; copying %d keys from %s", self.dc,
                 policy.version, policy.start_round, len(self.awaiting),
                 ", ".join(sorted(asks)) or "nobody")
        for source, keys in sorted(asks.items()):
            self.wan.send(source, Message(Kind.STATE_REQUEST,
                                          meta={"keys": keys, "version": self.version}))
        early, self.early = self.early, {}
        for dc, request in sorted(early.items()):
            self.on_state_request(dc, request)
        self._maybe_done()

    def _rollback_residuals(self) -> None:
        """Compression's error-feedback residuals back to before the rounds replayed
        (:meth:`~netstorm.geoserver.compression.feedback.ErrorFeedback.rollback`), before
        any chunk of the replay policy is encoded here."""
        codec = getattr(self.exchange, "codec", None)     # the native exchange: none
        if codec is None:
            return
        try:
            rolled = codec.rollback(self.rounds)
        except ValueError as exc:
            raise AbortError(f"{self.dc}: cannot replay compressed rounds: {exc}") from exc
        if rolled:
            log.info("%s: residuals of %d keys rolled back to before their replayed round",
                     self.dc, len(rolled))

    def _source(self, holders, asks: dict) -> str:
        """The holder to copy a key from: the fastest known link into this DC for the keys
        it already sends here (rate / (1 + keys); a holder without a direct link counts
        as rate 0), so copies travel over several links. O(holders)."""
        holders = [h for h in holders if h in self.dcs and h != self.dc]
        if not holders:
            raise AbortError(f"{self.dc}: REPLAY names no other DC to copy from")
        rates = self.wan.router.rates
        return max(holders, key=lambda h: ((rates.get((h, self.dc), 0.0) + 1e-9)
                                           / (1 + len(asks.get(h, ()))), h))

    def on_state_request(self, source: str, msg: Message) -> None:
        """Send ``source`` this DC's replica of the keys it asks for if the current
        recovery's plan has it copy them from here, once each; a request that comes before
        this DC has the plan (its REPLAY may come later than ``source``'s) waits for it, one
        per DC. Any other is dropped and logged: a replica is whole values and optimizer
        states, sent to no DC that does not need it."""
        keys = [int(k) for k in msg.meta["keys"]]
        if self._stale(msg):
            self._drops.log(source, "%s: dropped STATE_REQUEST from %s: of an earlier "
                            "recovery (policy %s, now %s)", self.dc, source,
                            msg.meta.get("version"), self.version)
            return
        if self.planless and source not in self.early:
            self.early[source] = msg
            return
        why = self._unplanned(source, keys)
        if why:
            self._drops.log(source, "%s: dropped STATE_REQUEST from %s: %s", self.dc,
                            source, why)
            return
        self.owed[source] -= set(keys)
        if not self.owed[source]:
            del self.owed[source]
        try:
            meta, frames = self.store.replicas.of(keys)
        except RequestError as exc:         # a key not here (or not initialized)
            log.error("%s: cannot send %s the replica it asked for: %s", self.dc, source, exc)
            return
        meta["version"] = self.version
        self.wan.send(source, Message(Kind.STATE, meta=meta, dtype=frames[0].dtype
                                      if frames else None, frames=frames))

    def _stale(self, msg: Message) -> bool:
        """Whether a replica message belongs to an earlier recovery than this DC's current
        one (a loss during a replacement restarts it under a new version; a message without
        a version is taken as the current one's, and checked against the plan as any)."""
        version = msg.meta.get("version")
        return version is not None and self.version is not None and version != self.version

    def _unplanned(self, source: str, keys: list) -> str:
        """Why ``source``'s STATE_REQUEST for ``keys`` is not answered; "" if it is."""
        if self.planless:
            return "a second request before this server has the plan (REPLAY)"
        if not keys:
            return "it names no key"
        if not (self.active or self.owed):
            return "this server is in no recovery"
        owed = set(self.owed.get(source, ()))
        for key in keys:                    # a key named twice is sent already the second time
            if key not in owed:
                return f"key {key} is not one the plan has it copy from here, or was sent " \
                       f"already"
            owed.discard(key)
        return ""

    def on_state(self, source: str, msg: Message) -> None:
        """Adopt ``source``'s replica of keys this DC asked it for in this recovery. A STATE
        that answers no outstanding request (none asked, keys asked of another DC, one that
        came late or twice) is dropped and logged: any DC may send one at any time. One that
        was asked for but fails its checks stops the server (:class:`AbortError`, naming
        ``source`` and the key): it came from the very DC the plan names, and without it
        this recovery cannot end."""
        keys = [k for k, *_ in msg.meta["keys"]]
        why = self._unasked(source, keys, msg)
        if why:
            self._drops.log(source, "%s: dropped STATE from %s: %s", self.dc, source, why)
            return
        expected = {k: self.awaiting[k][:2] for k in keys}
        try:
            replicas, spec, states, frames, mode = replica.decode(msg.meta, msg.frames,
                                                                  expected)
            self.store.replicas.adopt(replicas, spec, states, frames, mode)
        except (replica.ReplicaError, RequestError) as exc:    # RequestError: a key known here
            raise AbortError(f"{self.dc}: refused the replica from {source}: {exc}") from exc
        for rep in replicas:
            del self.awaiting[rep.key]
        log.info("%s: took %d keys from %s's replica", self.dc, len(replicas), source)
        self._maybe_done()

    def _unasked(self, source: str, keys: list, msg: Message) -> str:
        """Why ``source``'s STATE of ``keys`` is not taken; "" if it answers a request."""
        if self._stale(msg):
            return f"of an earlier recovery (policy {msg.meta.get('version')}, now " \
                   f"{self.version})"
        if not self.awaiting:
            return "no replica is awaited here (no recovery, or it came late or twice)"
        if not keys:
            return "it holds no key"
        seen: set = set()
        for key in keys:                    # a key held twice came already the second time
            if key in seen or self.awaiting.get(key, (None,) * 3)[2] != source:
                return f"key {key} was not asked of {source} (or came already)"
            seen.add(key)
        return ""

    def _maybe_done(self) -> None:
        if self.awaiting or not self.active:
            return
        self.store.replicas.replay(self.rounds)
        self.active, self.recovered_once = False, True
        log.warning("%s: recovered in %.2fs: every key at its round; replaying the rounds "
                    "after it", self.dc, time.monotonic() - self.started)
        self.po.send_scheduler(Message(Kind.RECOVERED))

    def release(self) -> list:
        """The worker requests kept until recovered (once), in arrival order."""
        held, self.held = self.held, []
        return held
