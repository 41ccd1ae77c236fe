"""A worker's part when its scheduler dies (``[recovery] scheduler_restarts``,
docs/recovery.md): held by the :class:`~netstorm.geoserver.worker.client.WorkerClient`.

Its pushes and pulls go on meanwhile (the scheduler is off the data path). Once the
scheduler was silent for ``dead_after_s`` the worker re-registers every beat with its
report (who it is, the workers it heard finish) until a new scheduler welcomes it
(:class:`~netstorm.geoserver.core.scheduler_watch.SchedulerWatch`, bounded by
``timeout_s``); the barriers it waits in are then asked of the new one. With restarts on,
a finishing worker's BYE is acknowledged (the scheduler answers with a WORKER_LEFT naming
it): a BYE lost with a dying scheduler is sent again to the new one, so the new one never
waits for a worker that is gone. O(1) per beat; O(pending requests) per WELCOME.
"""
from __future__ import annotations

import logging
import threading
import time

from ..core.scheduler_watch import SchedulerWatch, report_meta, welcome_refusal
from ..core.wire import Kind, Message

__all__ = ["SchedulerTakeover"]

log = logging.getLogger("netstorm.worker")


class SchedulerTakeover:
    """See the module doc. ``po``: the worker's Postoffice (its table, settings, the
    scheduler's connection); ``pending_barriers()``: the barrier numbers waiting now."""

    def __init__(self, po, me, pending_barriers, drops, now: float):
        self.po, self.me, self._pending_barriers, self._drops = po, me, pending_barriers, drops
        settings = po.settings
        self.restarts = settings.scheduler_restarts
        self.dead_after_s, self.timeout_s = settings.dead_after_s, settings.timeout_s
        self.watch = SchedulerWatch(po.table.scheduler().address, settings.dead_after_s,
                                    settings.timeout_s, self.restarts, now)
        self.left_ranks: set = set()    # workers heard to have finished
        self._bye: dict | None = None   # the BYE's meta once this worker leaves
        self.bye_acked = threading.Event()

    def beat(self, now: float) -> str:
        """Once a beat (I/O thread): why the worker must fail ("" if it goes on); while a
        new scheduler is awaited, re-register with it. Whether the scheduler is presumed
        dead is the Postoffice's verdict (its closed connection or learnt deadline)."""
        gone = self.watch.check(now, "" if self.watch.lost else self.po.scheduler_verdict(now))
        if not gone and self.watch.lost:
            finished = self.left_ranks | ({self.me.rank} if self._bye is not None else set())
            self.po.reregister(report_meta(self.me, finished=sorted(finished)))
        return gone

    def on_welcome(self, msg: Message) -> None:
        """A new scheduler's WELCOME (I/O thread): taken if it is one for this cluster;
        the waiting barriers and a BYE not yet acknowledged are sent to it."""
        refusal = welcome_refusal(self.po.table, self.me.id, msg.meta)
        if refusal:
            self._drops.log(msg.sender, "worker %d: dropped %s", self.me.rank, refusal)
            return
        if not self.watch.lost:         # a duplicate (it re-registered twice): taken once
            self.watch.back(time.monotonic())
            return
        self.watch.back(time.monotonic())
        self.po.judge_scheduler()           # its deadline is learnt afresh
        barriers = self._pending_barriers()
        for seq in barriers:
            self.po.send_scheduler(Message(Kind.BARRIER, seq=seq))
        if self._bye is not None and not self.bye_acked.is_set():
            self.po.send_scheduler(Message(Kind.BYE, meta=self._bye))
        log.warning("worker rank %d: a new scheduler took the cluster over%s", self.me.rank,
                    f"; barrier(s) {barriers} asked again" if barriers else "")

    def on_worker_left(self, rank: int) -> bool:
        """A WORKER_LEFT (I/O thread): True if it acknowledges this worker's own BYE."""
        if rank == self.me.rank:
            self.bye_acked.set()
            return True
        self.left_ranks.add(rank)
        return False

    @property
    def acknowledged(self) -> bool:
        """Whether a clean BYE is acknowledged here (scheduler restarts on)."""
        return self.restarts > 0

    def say_bye(self, meta: dict) -> None:
        """Send a clean BYE and wait for its acknowledgement (the I/O thread still
        running): the BYE is sent again to a new scheduler (:meth:`on_welcome`); at most
        ``dead_after_s + timeout_s`` and a little, then logged and given up."""
        self._bye = meta
        self.po.send_scheduler(Message(Kind.BYE, meta=meta))
        if not self.bye_acked.wait(self.dead_after_s + self.timeout_s + 1.0):
            log.warning("worker rank %d: the scheduler did not acknowledge its BYE within "
                        "%gs", self.me.rank, self.dead_after_s + self.timeout_s + 1.0)
