"""The scheduler's side of the replica audit, for its loop (docs/recovery-audit.md).

The DC servers' heartbeats carry digests of their replicas every ``[recovery]
audit_every`` rounds; :class:`~.replica_audit.ReplicaAudit` compares them. This part acts on
what it finds: one ``replica_audit`` stats record per audited round; a mismatch (or a count
error) stops the run naming the DCs, the key and the round; with ``server_restarts`` > 0 and
a strict majority, the odd replicas are instead replaced from the majority's through the
replica path of a server replacement (:meth:`.replacing.ServerReplacing.repair`), and the run
goes on; each DC's replica is repaired up to ``server_restarts`` times (a script that keeps
setting its DC's optimizer differently then stops the run). O(rows) per heartbeat.
"""
from __future__ import annotations

import collections
import logging
import time

from .liveness import ClusterAborted
from .replica_audit import ReplicaAudit

__all__ = ["ReplicaAuditing"]

log = logging.getLogger("netstorm.scheduler")
SHOWN = 3               # problems of one round spelled out (its record holds them all)


class ReplicaAuditing:
    """``replacing``: the scheduler's :class:`~.replacing.ServerReplacing`; ``stats``: its
    stats sink; ``repairs``: how often each DC's odd replica is replaced (``[recovery]
    server_restarts``; 0: a mismatch stops the run)."""

    def __init__(self, dcs, stats, replacing, repairs: int):
        self.audit = ReplicaAudit(dcs)
        self.stats, self.replacing, self.budget = stats, replacing, int(repairs)
        self.repaired: collections.Counter = collections.Counter()  # dc -> its repairs
        self.rounds = self.mismatches = self.count_errors = self.repairs = 0
        self._forgotten = None          # the replacement whose plan the audit has taken

    def on_heartbeat(self, dc: str, rows) -> None:
        """A server of ``dc`` reported ``rows`` (its heartbeat's ``audit``); raises
        :class:`ClusterAborted` on a divergence that is not repaired."""
        self._take_plan()
        for audit in self.audit.report(dc, rows):
            self._act(audit)

    def finish(self) -> None:
        """The run ended: the rounds still waiting, compared across the DCs that reported
        them, are recorded (nothing is acted on any more)."""
        for audit in self.audit.finish():
            self._record(audit)

    def _take_plan(self) -> None:
        """Once a replacement (or a repair) has its plan, what was reported of each key up
        to the round after its planned round is not compared: the copies replace those
        replicas."""
        current = self.replacing.current
        if current is None or current.plan is None or current is self._forgotten:
            return
        self._forgotten = current
        # + 1: an odd replica a round ahead applies that round again (its digest of the
        # first time may still come)
        self.audit.forget({k: rnd + 1 for k, (rnd, _, _) in current.plan.items()},
                          current.odd | {current.lost_dc})

    def _record(self, audit) -> None:
        self.rounds += 1
        self.mismatches += len(audit.mismatches)
        self.count_errors += len(audit.count_errors)
        self.stats({"t": round(time.monotonic(), 3), **audit.record()})

    def _act(self, audit) -> None:
        self._record(audit)
        problems = [m.describe() for m in audit.mismatches] + \
            [c.describe() for c in audit.count_errors]
        if not problems:
            return
        text = "; ".join(problems[:SHOWN]) + \
            (f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else "")
        if any(not m.majority for m in audit.mismatches):
            raise ClusterAborted(f"replica audit: {text}: no majority to copy from")
        if not self.budget:
            hint = " (with [recovery] server_restarts the odd replica would be replaced " \
                "from the majority's)" if audit.mismatches else ""
            raise ClusterAborted(f"replica audit: {text}{hint}")
        if not audit.mismatches:        # every replica agrees: nothing to copy
            log.error("replica audit of round %d: %s; the run goes on (every replica "
                      "agrees: there is nothing to copy)", audit.round, text)
            return
        if self.replacing.current is not None:
            log.warning("replica audit of round %d: %s; a replacement is under way: the "
                        "next audit after it checks again", audit.round, text)
            return
        odd = set().union(*(m.odd for m in audit.mismatches))
        spent = sorted(dc for dc in odd if self.repaired[dc] >= self.budget)
        if spent:
            raise ClusterAborted(f"replica audit: {text}; the replica of {', '.join(spent)} "
                                 f"was replaced {self.budget} time(s) already "
                                 f"([recovery] server_restarts)")
        self.repaired.update(odd)
        self.repairs += 1
        self.replacing.repair(odd, text)
