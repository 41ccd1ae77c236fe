"""A worker's part in replacing its lost DC server (docs/recovery.md), for
:class:`~netstorm.geoserver.worker_client.WorkerClient`.

With ``server_restarts`` a worker keeps each key's pushes until a value says their round
was applied (a replacement may need them again). When the scheduler says the DC's server
moved (NODE_MOVED), the worker asks the new process how far its rank got (RESUME) and sends
it the later pushes it kept, then every request still unanswered; requests made meanwhile
wait for that answer. A worker that rejoined, or a run resumed from a checkpoint, asks the
same at start-up (:meth:`ServerReplacement._resume`).

A mixin: it uses the client's ``_lock``, ``_pending``, ``_ids``, ``keys``, ``server``,
``po``, ``outbox``, ``_moving``, ``_keep_pushes`` and ``_kept`` (set by the client).
"""
from __future__ import annotations

import logging

from ..core.nodes import NodeInfo
from ..core.wire import Flag, Kind, Message

log = logging.getLogger("netstorm.worker")

KEPT_PUSH_ROUNDS = 8    # with server_restarts: a key's pushes kept at most, newest first


class ServerReplacement:
    """The replacement-server methods of a WorkerClient (see the module doc)."""

    def _server_moved(self, node: NodeInfo) -> None:
        """This DC's server was replaced (docs/recovery.md): reach the new process and ask
        it how far this rank got; requests made meanwhile wait for its answer (I/O thread)."""
        if node.id != self.server.id:
            self._drops.log(node.id, "worker %d: ignored NODE_MOVED naming %s", self.me.rank,
                            node.describe())
            return
        with self._lock:
            self.server = self.po.table.nodes[node.id] = self.server.moved_to(node)
            self.po.van.disconnect(node.id, linger_s=0)
            self.outbox.clear()     # as if lost with the old process: sent again below
            self._moving = next(self._ids)
            self.po.send(node.id, Message(Kind.RESUME, request=self._moving))
        log.warning("worker rank %d: %s was replaced (now at %s); resuming there",
                    self.me.rank, self.server.describe(), node.address)

    def _resend(self, pushed: dict) -> None:
        """The replacement has ``pushed[key]`` rounds of each key from this rank: send it
        the later pushes kept, in order, then every request still unanswered (I/O thread)."""
        lacking = ""
        with self._lock:
            self._moving = None
            for key, info in self.keys.items():
                kept = self._kept.get(key, {})
                later = range(pushed.get(key, 0) + 1, info.pushes + 1)
                lacking = lacking or next((f"round {r} of key {key}" for r in later
                                           if r not in kept), "")
                for msg in [kept[r] for r in later if r in kept]:
                    if msg.request not in self._pending:
                        msg.flags &= ~Flag.WANT_VALUE       # answered by the lost server
                    self.po.send(self.server.id, msg)
            again = [p.msg if p.msg.kind != Kind.PUSH else    # its round is there already:
                     Message(Kind.PULL, key=p.msg.key, seq=p.msg.seq, request=p.msg.request)
                     for p in self._pending.values() if p.msg is not None and
                     (p.msg.kind != Kind.PUSH or p.msg.seq <= pushed.get(p.msg.key, 0))]
            for msg in again:
                self.po.send(self.server.id, msg)
        if lacking:
            self._fail_all(f"worker rank {self.me.rank}: the replaced server lacks {lacking}, "
                           f"which this worker no longer keeps", caused_by_other=False)
            return
        log.info("worker rank %d: sent the replacement %d requests again", self.me.rank,
                 len(again))

    def _keep(self, msg: Message) -> None:
        """Keep a push until its round's value came (lock held)."""
        if self._keep_pushes and msg.kind == Kind.PUSH:
            kept = self._kept.setdefault(msg.key, {})
            kept[msg.seq] = msg
            kept.pop(msg.seq - KEPT_PUSH_ROUNDS, None)

    def _forget_before(self, key: int, rnd: int) -> None:
        """The rounds of ``key`` before ``rnd`` are in every replica: no need to keep them."""
        with self._lock:
            kept = self._kept.get(key, {})
            for old in [r for r in kept if r < rnd]:
                del kept[old]

    def _resume(self) -> tuple:
        reply = self._wait(self._submit(Message(Kind.RESUME), f"the rounds this rank had "
                                        f"pushed, from {self.server.describe()}"),
                           Kind.RESUMED)
        pushed = {int(k): int(n) for k, n in reply.meta["pushed"]}
        if self.po.rejoined:
            log.info("worker rank %d rejoined: its lost process had pushed %s", self.me.rank,
                     ", ".join(f"key {k} {n} round(s)" for k, n in sorted(pushed.items())))
        return int(reply.meta.get("base", 0)), pushed
