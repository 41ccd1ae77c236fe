"""A worker's side of the protocol (ps-lite's ``Customer``): requests, replies, heartbeats.

Needs no mxnet: it moves numpy arrays. Any thread may issue requests; one background thread
receives replies and routes them to the waiting request by id, and sends heartbeats. Every
wait is bounded by ``timeout_s`` and ends with an error naming what was awaited from whom;
an ABORT from the scheduler fails every pending and future request with its reason.
"""
from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from dataclasses import dataclass

import numpy as np

from .batch import Outbox
from .cli import write_reason
from .compression.feedback import UP, ErrorFeedback
from .nodes import WORKER, NodeInfo
from .pending import Pending
from .postoffice import Postoffice, RendezvousError
from .ratelog import RateLimitedLog
from .shared_slots import WorkerShares
from .van import TransportError, Van
from .worker_recovery import ServerReplacement
from .wire import Flag, Kind, Message, WireError, dtype_code
from .worker_settings import KVStoreError, WorkerSettings

log = logging.getLogger("netstorm.worker")


KEPT_STEP_COUNTS = 64   # esync: step counts kept per worker (keys a few rounds apart)


@dataclass
class KeyInfo:
    key: int
    shape: tuple
    dtype: np.dtype
    pushes: int = 0
    inits: int = 0
    received: int = 0       # rounds the server already has from this rank (a rejoined one)

    def __post_init__(self):
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize


class WorkerClient(ServerReplacement):
    def __init__(self, settings: WorkerSettings):
        self.settings = settings
        try:
            self.van = Van(f"worker {settings.dc}", settings.host, 0,
                           credentials=settings.credentials(),
                           local_dir=settings.run_dir, wakeable=True)
        except (KVStoreError, TransportError) as exc:
            raise settings.cannot_join(exc) from exc
        try:
            self.po = Postoffice(self.van, settings.scheduler, WORKER, settings.dc)
            self.me: NodeInfo = self.po.register(settings.timeout_s, settings.local_index)
        except (RendezvousError, TransportError) as exc:
            self.van.close()
            raise settings.cannot_join(exc) from exc
        except Exception:
            self.van.close()
            raise
        write_reason(settings.joined_file, f"joined as {self.me.describe()}")
        self.timeout_s = self.po.settings.timeout_s
        self.heartbeat_s = self.po.settings.heartbeat_s
        self.compression = self.po.settings.compression     # cluster-wide
        self.sync = self.po.settings.sync                   # cluster-wide
        # scope "all": pushes to the DC server are compressed too, with this worker's residuals
        self._push_codec = ErrorFeedback(self.compression, seed=self.me.id) \
            if self.compression.on and self.compression.scope == "all" else None
        self.server = self.po.table.server_of(self.me.dc)
        # small requests wait here a moment for others, to go as one BATCH (batch.py)
        self._fuse_bytes = self.po.settings.fuse_bytes
        self.outbox = Outbox(self.po.settings.fuse_linger_s)
        self._unsent: list = []         # (request, why) that could not be sent
        self.num_workers = len(self.po.table.workers())
        self.keys: dict = {}
        self._pending: dict = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._barriers = itertools.count(1)
        self._aborted: str | None = None
        self._departed: list = []    # (who, {key: rounds pushed}) of workers that finished
        self.caused_by_other = False    # a request failed because another node failed or
                                        # left: the launcher looks for that one first
        self.last_error: str | None = None      # the latest failure where the caller
                                                # only sees a wrapper (MXNet's engine)
        self._closed = threading.Event()
        self._steps_known = threading.Condition(self._lock)
        self._next_steps = {0: 1}   # esync: round -> local steps before the next round
        self._drops = RateLimitedLog(log)
        # a lost DC server can be replaced (docs/recovery.md): pushes are kept until a value
        # says their round was applied (the replacement may need them again)
        self._keep_pushes = self.po.settings.server_restarts > 0
        self._kept: dict = {}           # key -> {round: the PUSH sent}
        self._moving = None             # request id of the RESUME sent to a replacement
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
            self.resume_base, pushed = self._resume()
            self.resumed = pushed if self.po.rejoined else {}
        self._rounds_done = min(self.resumed.values(), default=0)   # by the lost process
        self.resumed_round = self.resume_base + self._rounds_done

    # ------------------------------------------------------------ plumbing
    def _io_loop(self) -> None:
        """Receive and route replies, send heartbeats. Messages were checked against their
        kind's schema on receipt; should one still upset :meth:`_dispatch`, it is logged and
        dropped: this thread must outlive any message, or a live worker looks dead."""
        for msg in self.po.take_early():
            self._dispatch_safely(msg)
        next_beat = 0.0
        scheduler, scheduler_seen = self.po.table.scheduler(), time.monotonic()
        dead_after_s = self.po.settings.dead_after_s
        while not self._closed.is_set():
            now = time.monotonic()
            if now >= next_beat:
                self.po.send_scheduler(Message(Kind.HEARTBEAT))
                next_beat = now + self.heartbeat_s
                self._expire(now)
                if now - scheduler_seen > dead_after_s and not self._aborted:
                    self._fail_all(f"the scheduler at {scheduler.address} sent nothing for "
                                   f"{now - scheduler_seen:.1f}s (dead_after_s="
                                   f"{dead_after_s:g}); it is presumed dead",
                                   caused_by_other=False)   # the cause is not in this launcher
            due = self._send_due(now) if self.outbox.messages else None
            while self._unsent:
                pending, error = self._unsent.pop()
                pending.end(error=error)
            msg = self.po.recv(max(0.0, (next_beat if due is None else min(due, next_beat))
                                   - now))
            if msg is not None:
                if msg.sender == scheduler.id:      # admitted: the scheduler's key
                    scheduler_seen = time.monotonic()
                    if msg.kind == Kind.HEARTBEAT:
                        continue
                self._dispatch_safely(msg)

    def _dispatch_safely(self, msg: Message) -> None:
        try:
            self._dispatch(msg)
        except Exception as exc:       # noqa: BLE001 - see _io_loop
            self._drops.log(msg.sender, "worker %d: dropped %s from node %d: %r", self.me.rank,
                            msg.kind.name, msg.sender, exc)

    def _dispatch(self, msg: Message) -> None:
        """Hand a reply to the request waiting for it (I/O thread only)."""
        if msg.kind == Kind.ABORT:
            self._fail_all(f"the run was aborted: {msg.meta.get('reason', '?')}")
            return
        if msg.kind == Kind.WORKER_LEFT:
            self._worker_left(str(msg.meta["who"]),
                              {int(k): int(n) for k, n in msg.meta["pushes"]})
            return
        if msg.kind == Kind.NODE_MOVED:
            self._server_moved(NodeInfo.from_json(msg.meta["node"]))
            return
        if msg.kind == Kind.RESUMED and self._moving is not None and \
                msg.request == self._moving:
            self._resend({int(k): int(n) for k, n in msg.meta["pushed"]})
            return
        token = ("barrier", msg.seq) if msg.kind == Kind.BARRIER_DONE else msg.request
        with self._lock:
            pending = self._pending.pop(token, None)
        if pending is None:
            self._drops.log(msg.sender, "worker %d: dropped unexpected %s (request %s) from %s",
                            self.me.rank, msg.kind.name, token,
                            self.po.table.describe(msg.sender))
            return
        pending.end(reply=msg)

    def _fail_all(self, reason: str, caused_by_other: bool = True) -> None:
        with self._lock:
            self.caused_by_other = caused_by_other
            self._aborted = reason
            pending, self._pending = list(self._pending.values()), {}
            self._steps_known.notify_all()
        for p in pending:
            p.end()

    def note_error(self, exc: BaseException) -> None:
        """Keep the latest error raised on the caller's behalf (see :attr:`last_error`)."""
        self.last_error = f"{type(exc).__name__}: {exc}"

    def _worker_left(self, who: str, pushes: dict) -> None:
        """Another worker finished, having pushed each key ``pushes[key]`` times: a later
        round of a key (and every barrier) needs it, so what waits for one fails now,
        naming it, instead of on timeout."""
        with self._lock:
            self._departed.append((who, pushes))
            doomed = []
            for token, pending in list(self._pending.items()):
                pending.error = self._left_error(pending.needs, pending.what)
                if pending.error:
                    del self._pending[token]
                    doomed.append(pending)
            self.caused_by_other |= bool(doomed)
        for pending in doomed:
            pending.end()

    def _left_error(self, needs, what: str) -> str:
        """Why a request for ``what`` needing ``needs`` can never be answered: the first
        worker that left before pushing what it needs ("" if none did; lock held)."""
        if needs is None:
            return ""
        key, rnd = needs
        if key is not None and self.sync.mode == "esync":
            return ""       # its DC's server goes on without it (docs/sync.md)
        for who, pushes in self._departed:
            done = pushes.get(key, 0)
            if key is None or rnd > done:
                after = "" if key is None else f" after round {done} of key {key}"
                return (f"worker rank {self.me.rank}: {who} finished{after}, so {what} can "
                        f"never come (every round and barrier needs every worker)")
        return ""

    def _refuse_if_left(self, needs, what: str) -> None:
        """Raise at once for a request that can never be answered (lock held)."""
        error = self._left_error(needs, what)
        if error:
            self.caused_by_other = True
            raise KVStoreError(error)

    @staticmethod
    def _needs(msg: Message):
        """What ``msg`` needs every worker for: pushes and pulls their key's round, barriers
        every worker (see :class:`Pending`)."""
        if msg.kind in (Kind.PUSH, Kind.PULL):
            return (msg.key, msg.seq) if msg.seq else None
        return (None, 0) if msg.kind == Kind.BARRIER else None

    def _submit(self, msg: Message, what: str, to_scheduler: bool = False, token=None,
                reserved=None):
        pending = Pending(what, self._needs(msg))
        pending.slots = reserved
        with self._lock:
            if self._aborted:
                raise KVStoreError(f"worker rank {self.me.rank}: {self._aborted}")
            self._refuse_if_left(pending.needs, what)
            if token is None:
                token = msg.request = next(self._ids)
            self._pending[token] = pending
            if to_scheduler:
                self._send_now()            # a barrier comes after what was asked before
                self.po.send_scheduler(msg)
                return pending
            pending.msg = msg
            self._keep(msg)
            self._post(msg)
        return pending

    def _post(self, msg: Message) -> None:
        """Send ``msg`` to this DC's server (lock held): a PULL, or a PUSH of a key smaller
        than ``fuse_bytes``, waits in the outbox for others; anything else goes now, after
        what waits there. While a replacement server is awaited nothing goes (it is sent
        once that one answered)."""
        if self._moving is not None:
            return
        if self._fuse_bytes and (msg.kind == Kind.PULL or msg.kind == Kind.PUSH and
                                 self.keys[msg.key].nbytes < self._fuse_bytes):
            action = self.outbox.add(msg, time.monotonic())
            if action == Outbox.WAKE:
                self.van.wake()             # the I/O thread sends it by outbox.due()
            elif action == Outbox.SEND:
                self._send_now()
            return
        self._send_now()
        self.po.send(self.server.id, msg)

    def _send_now(self) -> None:
        """Send what waits in the outbox (lock held). Should that fail, the requests it
        held fail with the reason (the I/O thread, which may be the sender, goes on)."""
        held = list(self.outbox.messages)
        waiting = self.outbox.take()
        if waiting is None:
            return
        try:
            self.po.send(self.server.id, waiting)
        except Exception as exc:        # noqa: BLE001 - each request carries it
            log.error("worker rank %d: could not send %d requests to %s: %r", self.me.rank,
                      len(held), self.server.describe(), exc)
            for msg in held:            # ended by the I/O thread, without the lock
                pending = self._pending.pop(msg.request, None) if msg.request else None
                if pending is not None:
                    self._unsent.append((pending, f"worker rank {self.me.rank}: could not "
                                                  f"send {pending.what}: {exc!r}"))
            self.van.wake()

    def _send_due(self, now: float):
        """Send what waits in the outbox if it is due (I/O thread); when the rest is."""
        with self._lock:
            due = self.outbox.due()
            if due is not None and due <= now:
                self._send_now()
                return None
            return due

    def _unanswered(self, pending: Pending) -> str:
        return (f"worker rank {self.me.rank}: waited {self.timeout_s:g}s for "
                f"{pending.what}; no answer (timeout_s in the cluster file)")

    def _expire(self, now: float) -> None:
        """Fail the requests a function waits for (:meth:`when_answered`) that are overdue,
        as :meth:`_wait` fails a thread's (I/O thread, once a beat; O(requests))."""
        with self._lock:
            overdue = [(token, p) for token, p in self._pending.items() if p.overdue(now)]
            for token, _ in overdue:
                del self._pending[token]
        for _, pending in overdue:
            pending.end(error=self._unanswered(pending))

    def when_answered(self, handle: Pending, function) -> None:
        """Call ``function()`` once the request ``handle`` (from :meth:`start_push` with
        ``want_value`` or :meth:`start_pull`) is answered or has failed, in the thread that
        learns it (at once, if it already is); :meth:`finish_into` then takes the value
        without waiting. Unanswered after ``timeout_s``, it fails as a waiting thread's
        would. Holds no thread meanwhile."""
        handle.then(function, time.monotonic() + self.timeout_s)

    def _wait(self, pending: Pending, expect: Kind) -> Message:
        if not pending.wait(self.timeout_s):
            raise KVStoreError(self._unanswered(pending))
        reply = pending.reply
        if reply is None:
            raise KVStoreError(pending.error or f"worker rank {self.me.rank}: "
                               f"{self._aborted} (while waiting for {pending.what})")
        if reply.kind == Kind.ERROR:
            raise KVStoreError(f"{self.server.describe()} rejected {pending.what}: "
                               f"{reply.meta.get('reason', '?')}")
        if reply.kind != expect:
            raise KVStoreError(f"worker rank {self.me.rank}: got {reply.kind.name} for "
                               f"{pending.what}, expected {expect.name}")
        return reply

    def _frames(self, info: KeyInfo, array: np.ndarray) -> list:
        """A key travels to and from its DC's server as one frame (ZeroMQ delivers a
        message whole anyway); the server cuts it into WAN chunks."""
        return [np.ascontiguousarray(array, dtype=info.dtype).reshape(-1)]

    def _value(self, info: KeyInfo, reply: Message) -> np.ndarray:
        arrays = reply.arrays()
        if len(arrays) != 1 or arrays[0].size != math.prod(info.shape):
            raise KVStoreError(f"value of key {info.key}: expected one frame of "
                               f"{math.prod(info.shape)} elements, got "
                               f"{[a.size for a in arrays]}")
        return arrays[0].reshape(info.shape)

    # ------------------------------------------------------------ API
    def declare(self, key: int, shape, dtype) -> KeyInfo:
        shape, dtype = tuple(int(s) for s in shape), np.dtype(dtype)
        try:
            dtype_code(dtype)
        except WireError as exc:
            raise KVStoreError(f"key {key}: {exc}") from None
        info = self.keys.get(key)
        if info is None:
            info = self.keys[key] = KeyInfo(key, shape, dtype)
        elif (info.shape, info.dtype) != (shape, dtype):
            raise KVStoreError(f"key {key} was initialized as {info.shape} {info.dtype}, "
                               f"not {shape} {dtype}")
        return info

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
                      dtype=info.dtype, frames=self._frames(info, value) if carry else [])
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
            frame, = self._frames(info, grad)
            if borrowed or self._keep_pushes and want_value:
                frame = frame.copy()    # the caller reuses its buffer
            if self._push_codec is not None:
                frame, encoded = self._push_codec.encode(key, 0, frame, info.pushes,
                                                         frame.size, UP)
                flags |= Flag.ENCODED if encoded else Flag.NONE
            frames = [frame]
        msg = Message(Kind.PUSH, key=key, seq=info.pushes, flags=flags, frames=frames,
                      dtype=frames[0].dtype if frames else info.dtype)
        what = f"value of key {key} after round {info.pushes} from {self.server.describe()}"
        if want_value:
            return self._submit(msg, what, reserved=reserved)
        with self._lock:
            self._refuse_if_left(self._needs(msg), f"round {msg.seq} of key {key}")
            self._keep(msg)
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
                target[:] = self._value(self.keys[key], reply).reshape(-1)
            elif not self.shares.read(handle.slots, target):
                raise KVStoreError(f"worker rank {self.me.rank}: {self.server.describe()} "
                                   f"answered key {key} in shared memory, unasked")
        finally:
            self.shares.done(key, handle.slots, handle.reply)
        if self._keep_pushes:           # rounds before it are in every replica
            self._forget_before(key, reply.seq)
        steps = reply.meta.get("steps") if reply.meta else None
        if steps is not None:
            with self._steps_known:
                self._next_steps[reply.seq] = int(steps)
                self._steps_known.notify_all()

    def steps_after(self, rnd: int) -> int:
        """esync: how many local steps the DC server asked for after round ``rnd``, waiting
        (bounded by ``timeout_s``) until that round's value has come."""
        with self._steps_known:
            if not self._steps_known.wait_for(lambda: rnd in self._next_steps
                                              or self._aborted, self.timeout_s):
                raise KVStoreError(f"worker rank {self.me.rank}: waited {self.timeout_s:g}s "
                                   f"for the step count after round {rnd} from "
                                   f"{self.server.describe()}")
            if rnd not in self._next_steps:
                raise KVStoreError(f"worker rank {self.me.rank}: {self._aborted}")
            for old in [r for r in self._next_steps if r < rnd - KEPT_STEP_COUNTS]:
                del self._next_steps[old]
            return self._next_steps[rnd]

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
                self._send_now()
            if self.outbox.batches:
                log.info("worker rank %d: %d small requests went to %s in %d messages",
                         self.me.rank, self.outbox.fused, self.server.describe(),
                         self.outbox.batches)
        else:
            self._fail_all(reason or "the store was closed after a failure",
                           caused_by_other=self.caused_by_other)
        self._closed.set()
        if not clean:
            write_reason(self.settings.reason_file, reason, self.caused_by_other)
        self._thread.join(timeout=2 * self.heartbeat_s + 1)
        try:
            pushes = [[k, info.pushes] for k, info in self.keys.items() if info.pushes]
            self.po.send_scheduler(Message(Kind.BYE, meta={"clean": clean, "reason": reason,
                                                           "pushes": pushes}))
        finally:
            self.van.close()
            self.shares.close()
