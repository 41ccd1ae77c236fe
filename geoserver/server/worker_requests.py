"""A DC server's desk for its local workers' requests: what waits, what is refused, what
goes on to the store.

A request waits while the server cannot take it yet: while a replacement server recovers
(:mod:`.recovery` keeps them), while no policy is known (at most
:data:`~netstorm.geoserver.config.settings.MAX_EARLY_MESSAGES`, then refused) and, with the round
gate (:mod:`.round_gate`), a push of a round not yet open (asking the scheduler for it with an early
heartbeat), and while a new optimizer is built: that imports MXNet (a second or more, longer under
load) on a thread of its own, so that the server's loop goes on beating and reading the scheduler's
beats meanwhile. A request the store cannot serve is answered with ERROR, logged rate-limited per
worker. O(1) per request; releasing n held requests is O(n).
"""
from __future__ import annotations

import time

from ..config.settings import MAX_EARLY_MESSAGES, MAX_ROUNDS_AHEAD
from ..core import wire
from ..core.wire import Kind, Message
from ..model.optimizer_host import build_in_background
from .local_store import RequestError

__all__ = ["WorkerRequests"]


class WorkerRequests:
    """The requests of this DC's workers, between the dispatch and the key store."""

    def __init__(self, dc: str, po, store, policies, gate, recovery, settings, balancer,
                 heartbeat, drops):
        """``heartbeat()``: send the scheduler a heartbeat now (asks for the next round);
        ``drops``: the server's rate-limited log."""
        self.dc, self.po, self.store, self.policies = dc, po, store, policies
        self.gate, self.recovery, self.balancer = gate, recovery, balancer
        self.sync = settings.sync
        self._heartbeat, self._drops = heartbeat, drops
        self._before_policy: list = []  # requests that came before the first policy
        self._building = None           # (SET_OPTIMIZER, future optimizer) while built
        self._before_optimizer: list = []   # requests that came meanwhile
        self._store_handlers = {         # kind -> the store's method for it
            Kind.INIT: store.on_init, Kind.PUSH: store.on_push, Kind.PULL: store.on_pull,
            Kind.SET_OPTIMIZER: self._set_optimizer, Kind.SAVE_STATES: store.on_save_states,
            Kind.LOAD_STATES: store.on_load_states, Kind.RESUME: store.on_resume}

    def accept(self, msg: Message) -> None:
        """A local worker's request: held while its round is not open (asking for a new
        round at once) or no policy is known yet, else handled. The replacement of a lost
        server keeps them until it recovered (docs/recovery.md)."""
        if not self.recovery.take(msg):
            return
        if self._building is not None:      # they may need it (a push's round applies it)
            if len(self._before_optimizer) < MAX_EARLY_MESSAGES:
                self._before_optimizer.append(msg)
            else:
                self.reject(msg, f"{MAX_EARLY_MESSAGES} requests already wait for the "
                                 f"optimizer to be built")
            return
        wan_round = self.sync.wan_round(msg.seq)
        if msg.kind == Kind.PUSH and self.balancer is not None:
            self.balancer.on_push(msg.sender, msg.seq, time.monotonic())
        if msg.kind == Kind.PUSH and self.gate.closed(wan_round):
            current = max(self.store.max_round, self.gate.requested)
            if wan_round > current + MAX_ROUNDS_AHEAD:    # never asked of the scheduler
                self.reject(msg, f"push of round {msg.seq} is more than {MAX_ROUNDS_AHEAD} "
                                 f"rounds ahead of this DC's round {current}")
            elif self.gate.hold(wan_round, msg, time.monotonic()):
                self._heartbeat()
        elif msg.kind == Kind.PUSH and not self.policies.empty and \
                self.gate.passed(wan_round):
            self._heartbeat()                 # the next round, a round ahead
            self._handle(msg)
        elif self.policies.empty:
            if len(self._before_policy) < MAX_EARLY_MESSAGES:
                self._before_policy.append(msg)
            else:
                self.reject(msg, f"{MAX_EARLY_MESSAGES} requests already wait for the "
                                 f"first policy")
        else:
            self._handle(msg)

    def policy_known(self) -> None:
        """The first policy came: the requests that waited for it go on, in order."""
        waiting, self._before_policy = self._before_policy, []
        for request in waiting:
            self.accept(request)

    def open(self, rnd: int) -> None:
        """Round ``rnd`` is open: the pushes the round gate held for it go on."""
        for request in self.gate.open(rnd, time.monotonic()):
            self.accept(request)

    def recovered(self) -> None:
        """Once recovered, the replacement takes the requests its workers sent meanwhile."""
        if not self.recovery.active:
            for request in self.recovery.release():
                self.accept(request)

    def _set_optimizer(self, msg: Message) -> None:
        """A new optimizer is built off the loop (:func:`build_in_background`); the one in
        place is answered at once."""
        if self.store.optimizer_wanted(msg):
            self._building = msg, build_in_background(self.store.build_optimizer,
                                                      msg.meta.get("spec"))
        else:
            self.store.on_set_optimizer(msg)

    def take_built_optimizer(self) -> None:
        """If the optimizer being built is ready, the store takes it (a failure to build it
        is answered with ERROR), then the requests that waited for it go on, in order.
        Called by the server's loop once a wake-up. O(1), O(n) for n waiting requests."""
        if self._building is None or not self._building[1].done():
            return
        (msg, future), self._building = self._building, None
        try:
            self.store.on_set_optimizer(msg, build=lambda spec: future.result())
        except RequestError as exc:
            self.reject(msg, str(exc))
        waiting, self._before_optimizer = self._before_optimizer, []
        for request in waiting:
            self.accept(request)

    def _handle(self, msg: Message) -> None:
        try:
            self._store_handlers[msg.kind](msg)
        except (RequestError, wire.WireError) as exc:
            self.reject(msg, str(exc))

    def reject(self, msg: Message, reason: str) -> None:
        """Answer a local worker's request with ERROR (logged, rate-limited per worker)."""
        self._drops.log(msg.sender, "%s: rejected %s of key %d from %s: %s", self.dc,
                        msg.kind.name, msg.key, self.po.table.describe(msg.sender), reason)
        self.po.send(msg.sender, Message(Kind.ERROR, key=msg.key, request=msg.request,
                                         meta={"reason": reason}))
