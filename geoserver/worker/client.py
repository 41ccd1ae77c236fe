"""A worker's side of the protocol (ps-lite's ``Customer``): requests, replies, heartbeats.

Needs no mxnet: it moves numpy arrays. Any thread may issue requests; one background thread
receives replies and routes them to the waiting request by id, and sends heartbeats. Every
wait is bounded by ``timeout_s`` and ends with an error naming what was awaited from whom;
an ABORT from the scheduler fails every pending and future request with its reason.

The client is the API and the I/O thread; it holds its parts: the pending requests and how
they fail (``requests``: :class:`~netstorm.geoserver.worker.requests.Requests`), the link to
its DC's server and the send side (``link``: :class:`~netstorm.geoserver.worker.link.ServerLink`),
the declared keys (:mod:`~netstorm.geoserver.worker.keys`) and their shared memory
(``shares``), and its part in replacing a lost DC server (``replacement``:
:class:`~netstorm.geoserver.worker.replacement.ServerReplacement`).
"""
from __future__ import annotations

import itertools
import logging
import math
import threading
import time

import numpy as np

from ..config.exit_reasons import write_reason
from ..compression.feedback import ErrorFeedback
from ..core.kinds import handlers_for
from ..core.nodes import WORKER, NodeInfo
from .pending import Pending
from ..core.ratelog import RateLimitedLog
from .shared_slots import WorkerShares
from .join import join
from .keys import KeyInfo, declare, frames as key_frames, push_frame, value as key_value
from .link import ServerLink
from .progress import Progress
from .replacement import ServerReplacement
from .requests import Requests, needs
from .steps import StepCounts
from .takeover import SchedulerTakeover
from ..core.wire import Flag, Kind, Message
from .settings import KVStoreError, WorkerSettings

__all__ = ["KVStoreError", "KeyInfo", "WorkerClient", "WorkerSettings"]

log = logging.getLogger("netstorm.worker")


class WorkerClient:
    def __init__(self, settings: WorkerSettings):
        self.settings = settings
        self.van, self.po, self.me = join(settings)
        self.timeout_s = self.po.settings.timeout_s
        self.heartbeat_s = self.po.settings.heartbeat_s
        self.compression = self.po.settings.compression     # cluster-wide
        self.sync = self.po.settings.sync                   # cluster-wide
        # scope "all": pushes to the DC server are compressed too, with this worker's residuals
        self._push_codec = ErrorFeedback(self.compression, seed=self.me.id) \
            if self.compression.on and self.compression.scope == "all" else None
        self.requests = Requests(self.me.rank, self.timeout_s, self.sync.mode == "esync")
        self._lock = self.requests.lock
        # small requests wait in the link's outbox a moment for others, to go as one BATCH
        self.link = ServerLink(self.po, self.van, self.po.table.server_of(self.me.dc),
                               self.requests, self.po.settings.fuse_bytes,
                               self.po.settings.fuse_linger_s)
        self.outbox = self.link.outbox
        self.num_workers = len(self.po.table.workers())
        self.keys: dict = {}
        self._barriers = itertools.count(1)
        self.last_error: str | None = None      # the latest failure where the caller
                                                # only sees a wrapper (MXNet's engine)
        self._closed = threading.Event()
        self.steps = StepCounts(self.requests)     # esync: local steps after each round
        self.progress = Progress(time.monotonic())  # its data path, told on heartbeats
        self._drops = RateLimitedLog(log)
        self._handlers = handlers_for(WORKER, self)     # kind -> its handler (core/kinds.py)
        # a silent scheduler: fail, or with scheduler_restarts await a new one (rebuild)
        self.takeover = SchedulerTakeover(self.po, self.me, self._pending_barriers,
                                          self._drops, time.monotonic())
        # a lost DC server can be replaced (docs/recovery.md): pushes are kept until a value
        # says their round was applied (the replacement may need them again)
        self._keep_pushes = self.po.settings.server_restarts > 0
        self.replacement = ServerReplacement(self.requests, self.link, self.keys,
                                             self._keep_pushes)
        # keys in shared memory with the DC server when it runs on this host (ipc://);
        # not when pushes are kept for a replacement, or pushes are compressed
        self.shares = WorkerShares(self.po.address_of(self.server).startswith("ipc://") and
                                   not self._keep_pushes and self._push_codec is None)
        self._thread = threading.Thread(target=self._io_loop, name="netstorm-io", daemon=True)
        self._thread.start()
        # a worker restarted into its rank: the rounds of each key its lost process had
        # pushed, and the steps done (the fewest of them); in a run resumed from a
        # checkpoint, those are counted from the checkpoint's round (docs/recovery.md)
        self.resumed: dict = {}
        self.resume_base = 0            # the rounds before this run's first
        if self.po.rejoined or self.po.settings.resume:
            self.resume_base, pushed = self.replacement.resume(self._ask_within,
                                                               self.po.rejoined)
            self.resumed = pushed if self.po.rejoined else {}
        self._rounds_done = min(self.resumed.values(), default=0)   # by the lost process
        self.resumed_round = self.resume_base + self._rounds_done

    @property
    def server(self) -> NodeInfo:
        """This DC's server (a replacement's process, once it moved)."""
        return self.link.server

    @property
    def _pending(self) -> dict:
        return self.requests.pending

    @property
    def _moving(self):
        """The request id of the RESUME sent to a replacement server, while it is awaited."""
        return self.replacement.moving

    @property
    def caused_by_other(self) -> bool:
        """A request failed because another node failed or left: the launcher looks for
        that one first."""
        return self.requests.caused_by_other

    @caused_by_other.setter
    def caused_by_other(self, value: bool) -> None:
        self.requests.caused_by_other = value

    # ------------------------------------------------------------ plumbing
    def _io_loop(self) -> None:
        """Receive and route replies, send heartbeats. Messages were checked against their
        kind's schema on receipt; should one still upset :meth:`_dispatch`, it is logged and
        dropped: this thread must outlive any message, or a live worker looks dead."""
        for msg in self.po.take_early():
            self._dispatch_safely(msg)
        next_beat = 0.0
        scheduler, takeover = self.po.table.scheduler(), self.takeover
        while not self._closed.is_set():
            now = time.monotonic()
            if now >= next_beat:
                meta = self.progress.beat_meta(self.keys, *self.requests.waiting(), now)
                self.po.send_scheduler(Message(Kind.HEARTBEAT, meta=meta))   # its data path
                next_beat = now + self.heartbeat_s
                self.requests.expire(now)
                gone = "" if self.requests.aborted else \
                    takeover.beat(now)          # pushes and pulls go on meanwhile
                if gone:                # closed, or silent (core/postoffice.py)
                    self._fail_all(gone, caused_by_other=False)  # not in this launcher
            due = self.link.send_due(now) if self.outbox.messages else None
            self.link.end_unsent()
            msg = self.po.recv(max(0.0, (next_beat if due is None else min(due, next_beat))
                                   - now))
            if msg is not None:
                if msg.sender == scheduler.id:      # admitted: the scheduler's key
                    takeover.watch.heard(time.monotonic())
                self._dispatch_safely(msg)

    def _dispatch_safely(self, msg: Message) -> None:
        try:
            self._dispatch(msg)
        except Exception as exc:       # noqa: BLE001 - see _io_loop
            self._drops.log(msg.sender, "worker %d: dropped %s from node %d: %r", self.me.rank,
                            msg.kind.name, msg.sender, exc)

    def _dispatch(self, msg: Message) -> None:
        """Hand a message to its kind's handler (core/kinds.py; I/O thread only)."""
        handler = self._handlers.get(msg.kind)
        if handler is None:
            self._drops.log(msg.sender, "worker %d: dropped unexpected %s from %s",
                            self.me.rank, msg.kind.name, self.po.table.describe(msg.sender))
            return
        handler(msg)

    def _on_heartbeat(self, msg: Message) -> None:
        """The scheduler is alive (:meth:`_io_loop` noted it); it says who has not pushed
        the rounds this worker waits for (a request that times out names them)."""
        self.requests.note_missing(msg.meta.get("missing", ()))

    def _on_welcome(self, msg: Message) -> None:
        """A new scheduler took the cluster over (:mod:`.takeover`)."""
        self.takeover.on_welcome(msg)

    def _pending_barriers(self) -> list:
        """The barriers this worker waits in (a new scheduler is asked them again)."""
        with self._lock:
            return [token[1] for token in self._pending
                    if isinstance(token, tuple) and token[0] == "barrier"]

    def _on_abort(self, msg: Message) -> None:
        self._fail_all(f"the run was aborted: {msg.meta.get('reason', '?')}")

    def _on_worker_left(self, msg: Message) -> None:
        if self.takeover.on_worker_left(int(msg.meta["rank"])):    # its own BYE's answer
            return
        self._worker_left(str(msg.meta["who"]), {int(k): int(n) for k, n in msg.meta["pushes"]})

    def _on_node_moved(self, msg: Message) -> None:
        self._server_moved(NodeInfo.from_json(msg.meta["node"]))

    def _on_resumed(self, msg: Message) -> None:
        """The replacement's answer to the RESUME sent when it moved, or a RESUME's reply."""
        if self._moving is not None and msg.request == self._moving:
            self._resend({int(k): int(n) for k, n in msg.meta["pushed"]})
        else:
            self._on_reply(msg)

    def _on_barrier_done(self, msg: Message) -> None:
        self._end(("barrier", msg.seq), msg)

    def _on_reply(self, msg: Message) -> None:
        self._end(msg.request, msg)

    def _end(self, token, msg: Message) -> None:
        """Hand a reply to the request waiting for it under ``token``."""
        with self._lock:
            pending = self._pending.pop(token, None)
        if pending is None:
            self._drops.log(msg.sender, "worker %d: dropped unexpected %s (request %s) from %s",
                            self.me.rank, msg.kind.name, token,
                            self.po.table.describe(msg.sender))
            return
        pending.end(reply=msg)

    def _fail_all(self, reason: str, caused_by_other: bool = True) -> None:
        self.requests.fail_all(reason, caused_by_other)

    def note_error(self, exc: BaseException) -> None:
        """Keep the latest error raised on the caller's behalf (see :attr:`last_error`)."""
        self.last_error = f"{type(exc).__name__}: {exc}"

    def _worker_left(self, who: str, pushes: dict) -> None:
        """Another worker finished: fail what waits for it (:meth:`Requests.worker_left`)."""
        self.requests.worker_left(who, pushes)

    def _server_moved(self, node: NodeInfo) -> None:
        self.replacement.server_moved(node, self._drops)

    def _resend(self, pushed: dict) -> None:
        self.replacement.resend(pushed)

    def _submit(self, msg: Message, what: str, to_scheduler: bool = False, token=None,
                reserved=None):
        pending = Pending(what, needs(msg))
        pending.slots = reserved
        with self._lock:
            self.requests.add(pending, msg, token)
            if to_scheduler:
                self.link.send_now()        # a barrier comes after what was asked before
                self.po.send_scheduler(msg)
                self.progress.sent(msg.kind, msg.seq, time.monotonic())
                return pending
            pending.msg = msg
            self.replacement.keep(msg)
            self._post(msg)
        return pending

    def _post(self, msg: Message) -> None:
        """Send ``msg`` to this DC's server (lock held; :meth:`ServerLink.post`). While a
        replacement server is awaited nothing goes (it is sent once that one answered)."""
        if self._moving is None:
            self.link.post(msg, self.keys)
        self.progress.sent(msg.kind, msg.seq, time.monotonic())

    def when_answered(self, handle: Pending, function) -> None:
        """Call ``function()`` once the request ``handle`` (from :meth:`start_push` with
        ``want_value`` or :meth:`start_pull`) is answered or has failed, in the thread that
        learns it (at once, if it already is); :meth:`finish_into` then takes the value
        without waiting. Unanswered after ``timeout_s``, it fails as a waiting thread's
        would. Holds no thread meanwhile."""
        self.requests.when_answered(handle, function)

    def _ask_within(self, msg: Message, what: str, expect: Kind, patience_s: float):
        """Ask this DC's server; its reply, or None (the request withdrawn) if none came
        within ``patience_s``."""
        pending = self._submit(msg, what)
        if not pending.wait(patience_s):
            self.requests.withdraw(msg.request)
            return None
        return self._wait(pending, expect)

    def _wait(self, pending: Pending, expect: Kind) -> Message:
        return self.requests.wait(pending, expect, self.server.describe())

    # ------------------------------------------------------------ API
    def declare(self, key: int, shape, dtype) -> KeyInfo:
        return declare(self.keys, key, shape, dtype)

    def init(self, key: int, value: np.ndarray, sparse: bool = False) -> None:
        """Declare ``key``; rank 0's value becomes the initial value everywhere. Blocks until
        this DC's server holds the value of this init. ``sparse``: the key's gradients are
        row_sparse (the servers' optimizer then updates only the rows they touch)."""
        info = self.declare(key, value.shape, value.dtype)
        info.inits += 1
        carry = self.me.rank == 0 and not self.po.rejoined    # never resets a running model
        if key in self.resumed:
            info.pushes, info.received = self._rounds_done, self.resumed[key]
        meta = {"shape": list(info.shape), "dtype": info.dtype.str}
        if sparse:
            meta["stype"] = "row_sparse"
        offered = None if sparse else self.shares.offer(key, value.size, info.dtype)
        if offered is not None:
            meta["shm_fd"] = offered.fd
        msg = Message(Kind.INIT, key=key, seq=info.inits,
                      flags=Flag.HAS_VALUE if carry else Flag.NONE, meta=meta,
                      dtype=info.dtype, frames=key_frames(info, value) if carry else [])
        reply = self._wait(self._submit(msg, f"init of key {key} from "
                                             f"{self.server.describe()}"), Kind.INIT_DONE)
        self.shares.settle(key, offered, bool(reply.meta.get("shared")))

    def start_push(self, key: int, grad: np.ndarray, want_value: bool, borrowed=False):
        """Send round n+1 of ``key``; returns a handle for :meth:`finish_into` (if want_value).
        ``borrowed``: ``grad`` is valid during this call only (it is copied, to shared memory
        or to a frame); else it must stay as it is until the handle is finished."""
        info = self.keys.get(key)
        if info is None:
            raise KVStoreError(f"key {key} has not been initialized (call init first)")
        if grad.shape != info.shape and grad.size != math.prod(info.shape):
            raise KVStoreError(f"key {key}: pushed shape {grad.shape}, key is {info.shape}")
        info.pushes += 1
        if info.pushes <= info.received:    # the lost process of this rank sent it already
            return self.start_pull(key) if want_value else None
        flags = Flag.WANT_VALUE if want_value else Flag.NONE
        reserved = self.shares.reserve_reply(key) if want_value else None
        flags |= Flag.REPLY_SHARED if reserved is not None else Flag.NONE
        if self.shares.push(key, info.pushes, grad):
            frames, flags = [], flags | Flag.SHARED
        else:
            frame, encoded = push_frame(info, grad, borrowed or self._keep_pushes and want_value,
                                        self._push_codec)
            frames, flags = [frame], flags | encoded
        msg = Message(Kind.PUSH, key=key, seq=info.pushes, flags=flags, frames=frames,
                      dtype=frames[0].dtype if frames else info.dtype)
        what = f"value of key {key} after round {info.pushes} from {self.server.describe()}"
        if want_value:
            return self._submit(msg, what, reserved=reserved)
        with self._lock:
            self.requests.refuse_if_left(needs(msg), f"round {msg.seq} of key {key}")
            self.replacement.keep(msg)
            self._post(msg)
        return None

    def start_pull(self, key: int):
        info = self.keys.get(key)
        if info is None:
            raise KVStoreError(f"key {key} has not been initialized (call init first)")
        reserved = self.shares.reserve_reply(key)
        msg = Message(Kind.PULL, key=key, seq=info.pushes,
                      flags=Flag.REPLY_SHARED if reserved is not None else Flag.NONE)
        return self._submit(msg, f"value of key {key} after round {info.pushes} from "
                                 f"{self.server.describe()}", reserved=reserved)

    def finish_into(self, key: int, handle, target: np.ndarray) -> None:
        """Wait for the VALUE answering a push (want_value) or a pull and write it into the
        flat array ``target``."""
        try:
            reply = self._wait(handle, Kind.VALUE)
            if not reply.flags & Flag.SHARED:
                target[:] = key_value(self.keys[key], reply).reshape(-1)
            elif not self.shares.read(handle.slots, target):
                raise KVStoreError(f"worker rank {self.me.rank}: {self.server.describe()} "
                                   f"answered key {key} in shared memory, unasked")
        finally:
            self.shares.done(key, handle.slots, handle.reply)
        if self._keep_pushes:           # rounds before it are in every replica
            self.replacement.forget_before(key, reply.seq)
        steps = reply.meta.get("steps") if reply.meta else None
        if steps is not None:
            self.steps.record(reply.seq, int(steps))

    def steps_after(self, rnd: int) -> int:
        """esync: how many local steps the DC server asked for after round ``rnd``, waiting
        (bounded by ``timeout_s``) until that round's value has come."""
        return self.steps.after(rnd, self.server.describe())

    def set_optimizer(self, spec: dict) -> None:
        self._wait(self._submit(Message(Kind.SET_OPTIMIZER, meta={"spec": spec}),
                                f"optimizer acknowledgement from {self.server.describe()}"),
                   Kind.OPTIMIZER_DONE)

    def save_states(self) -> Message:
        return self._wait(self._submit(Message(Kind.SAVE_STATES),
                                       f"optimizer states from {self.server.describe()}"),
                          Kind.STATES)

    def load_states(self, meta: dict, frames) -> None:
        msg = Message(Kind.LOAD_STATES, meta=meta, dtype=np.uint8, frames=frames)
        self._wait(self._submit(msg, f"optimizer-state acknowledgement from "
                                     f"{self.server.describe()}"), Kind.OPTIMIZER_DONE)

    def barrier(self) -> None:
        seq = next(self._barriers)
        pending = self._submit(Message(Kind.BARRIER, seq=seq),
                               f"barrier {seq} (all {self.num_workers} workers) from the "
                               f"scheduler", to_scheduler=True, token=("barrier", seq))
        self._wait(pending, Kind.BARRIER_DONE)

    def close(self, clean: bool = True, reason: str = "") -> None:
        """Say BYE to the scheduler (``clean``: finished, else failed for ``reason``) and
        close the sockets. After a failure, every request still waiting fails now (the
        operators blocked on them end instead of waiting out ``timeout_s``); who caused the
        failure stays as it was."""
        if self._closed.is_set():
            return
        if clean:
            with self._lock:
                self.link.send_now()
            if self.outbox.batches:
                log.info("worker rank %d: %d small requests went to %s in %d messages",
                         self.me.rank, self.outbox.fused, self.server.describe(),
                         self.outbox.batches)
        else:
            self._fail_all(reason or "the store was closed after a failure",
                           caused_by_other=self.caused_by_other)
        pushes = [[k, info.pushes] for k, info in self.keys.items() if info.pushes]
        bye = {"clean": clean, "reason": reason, "pushes": pushes}
        acknowledged = clean and self.takeover.acknowledged and not self.requests.aborted
        if acknowledged:                # scheduler restarts: a BYE lost is sent again
            self.takeover.say_bye(bye)
        self._closed.set()
        if not clean:
            write_reason(self.settings.reason_file, reason, self.caused_by_other)
        self._thread.join(timeout=2 * self.heartbeat_s + 1)
        try:
            if not acknowledged:
                self.po.send_scheduler(Message(Kind.BYE, meta=bye))
        finally:
            self.van.close()
            self.shares.close()