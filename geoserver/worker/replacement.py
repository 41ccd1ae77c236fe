"""A worker's part in replacing its lost DC server (docs/recovery.md), held by
:class:`~netstorm.geoserver.worker.client.WorkerClient` as its ``replacement``.

With ``server_restarts`` a worker keeps each key's pushes until a value says their round
was applied (a replacement may need them again). When the scheduler says the DC's server
moved (NODE_MOVED), the worker asks the new process how far its rank got (RESUME) and sends
it the later pushes it kept, then every request still unanswered; requests made meanwhile
wait for that answer (:attr:`ServerReplacement.moving`). A worker that rejoined, or a run
resumed from a checkpoint, asks the same at start-up (:meth:`ServerReplacement.resume`).

It sees only the client's requests book (:class:`~netstorm.geoserver.worker.requests.Requests`:
lock, pending requests, request ids, failing them all), its link to the server
(:class:`~netstorm.geoserver.worker.link.ServerLink`) and its declared keys; the client
calls :meth:`~ServerReplacement.keep`, :meth:`~ServerReplacement.forget_before`,
:meth:`~ServerReplacement.server_moved`, :meth:`~ServerReplacement.resend` and
:meth:`~ServerReplacement.resume`.
"""
from __future__ import annotations

import logging
import time

from ..core.nodes import NodeInfo
from ..core.wire import Flag, Kind, Message
from .settings import KVStoreError

__all__ = ["KEPT_PUSH_ROUNDS", "RESUME_AGAIN_S", "ServerReplacement", "pushed_summary"]

log = logging.getLogger("netstorm.worker")

RESUME_AGAIN_S = 2.0    # a RESUME unanswered this long is asked again (see resume)
KEPT_PUSH_ROUNDS = 8    # with server_restarts: a key's pushes kept at most, newest first


def pushed_summary(pushed: dict) -> str:
    """``{key: rounds pushed}`` for a log line: runs of consecutive keys with the same count
    in one phrase (``keys 0-29 49 round(s) each``), others one by one (``key 3 5 round(s)``).
    O(keys log keys)."""
    runs: list = []         # [first key, last key, rounds]
    for key, rounds in sorted(pushed.items()):
        if runs and runs[-1][1] == key - 1 and runs[-1][2] == rounds:
            runs[-1][1] = key
        else:
            runs.append([key, key, rounds])
    return ", ".join(f"key {a} {n} round(s)" if a == b else f"keys {a}-{b} {n} round(s) each"
                     for a, b, n in runs) or "nothing"


class ServerReplacement:
    """Pushes kept for a replacement server, and the RESUME exchange with it (see the
    module doc). ``keep_pushes``: ``server_restarts`` > 0."""

    def __init__(self, requests, link, keys: dict, keep_pushes: bool):
        self.requests, self.link, self.keys = requests, link, keys
        self.keep_pushes = keep_pushes
        self.kept: dict = {}            # key -> {round: the PUSH sent}
        self.moving = None              # request id of the RESUME sent to a replacement

    def server_moved(self, node: NodeInfo, drops) -> None:
        """This DC's server was replaced (docs/recovery.md): reach the new process and ask
        it how far this rank got; requests made meanwhile wait for its answer (I/O thread).
        ``drops``: where a NODE_MOVED naming another node is logged."""
        rank = self.requests.rank
        if node.id != self.link.server.id:
            drops.log(node.id, "worker %d: ignored NODE_MOVED naming %s", rank,
                      node.describe())
            return
        with self.requests.lock:
            self.link.moved_to(node)    # what waited in the outbox is sent again below
            self.moving = next(self.requests.ids)
            self.link.po.send(node.id, Message(Kind.RESUME, request=self.moving))
        log.warning("worker rank %d: %s was replaced (now at %s); resuming there", rank,
                    self.link.server.describe(), node.address)

    def resend(self, pushed: dict) -> None:
        """The replacement has ``pushed[key]`` rounds of each key from this rank: send it
        the later pushes kept, in order, then every request still unanswered (I/O thread).
        O(keys x kept rounds + requests)."""
        lacking, rank, send = "", self.requests.rank, self.link.po.send
        with self.requests.lock:
            self.moving = None
            pending, server = self.requests.pending, self.link.server.id
            for key, info in self.keys.items():
                kept = self.kept.get(key, {})
                later = range(pushed.get(key, 0) + 1, info.pushes + 1)
                lacking = lacking or next((f"round {r} of key {key}" for r in later
                                           if r not in kept), "")
                for msg in [kept[r] for r in later if r in kept]:
                    if msg.request not in pending:
                        msg.flags &= ~Flag.WANT_VALUE       # answered by the lost server
                    send(server, msg)
            again = [p.msg if p.msg.kind != Kind.PUSH else    # its round is there already:
                     Message(Kind.PULL, key=p.msg.key, seq=p.msg.seq, request=p.msg.request)
                     for p in pending.values() if p.msg is not None and
                     (p.msg.kind != Kind.PUSH or p.msg.seq <= pushed.get(p.msg.key, 0))]
            for msg in again:
                send(server, msg)
        if lacking:
            self.requests.fail_all(f"worker rank {rank}: the replaced server lacks "
                                   f"{lacking}, which this worker no longer keeps",
                                   caused_by_other=False)
            return
        log.info("worker rank %d: sent the replacement %d requests again", rank, len(again))

    def keep(self, msg: Message) -> None:
        """Keep a push until its round's value came (lock held)."""
        if self.keep_pushes and msg.kind == Kind.PUSH:
            kept = self.kept.setdefault(msg.key, {})
            kept[msg.seq] = msg
            kept.pop(msg.seq - KEPT_PUSH_ROUNDS, None)

    def forget_before(self, key: int, rnd: int) -> None:
        """The rounds of ``key`` before ``rnd`` are in every replica: no need to keep them."""
        with self.requests.lock:
            kept = self.kept.get(key, {})
            for old in [r for r in kept if r < rnd]:
                del kept[old]

    def resume(self, ask, rejoined: bool) -> tuple:
        """At start-up (a rejoined worker, a run resumed from a checkpoint): ask the DC's
        server how far this rank got, with ``ask(msg, what, expected kind, patience) ->
        reply or None`` (the client's request, withdrawn unanswered after ``patience``
        seconds); ``(base round, {key: rounds pushed})``. RESUME is asked again every
        ``RESUME_AGAIN_S`` until answered (``timeout_s`` in all): a rejoined worker's first
        one may reach its server before the scheduler told the server this process's
        address (they come on different paths), and the answer then went to the lost
        process's address (seen on paper9 under chaos: the run stalled until timeout_s)."""
        what = f"the rounds this rank had pushed, from {self.link.server.describe()}"
        deadline = time.monotonic() + self.requests.timeout_s
        reply = None
        while reply is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise KVStoreError(f"worker rank {self.requests.rank}: waited "
                                   f"{self.requests.timeout_s:g}s for {what}; no answer "
                                   f"(timeout_s in the cluster file)")
            reply = ask(Message(Kind.RESUME), what, Kind.RESUMED, min(RESUME_AGAIN_S, left))
        pushed = {int(k): int(n) for k, n in reply.meta["pushed"]}
        if rejoined:
            log.info("worker rank %d rejoined: its lost process had pushed %s",
                     self.requests.rank,
                     pushed_summary(pushed))
        return int(reply.meta.get("base", 0)), pushed
