"""The new scheduler's side of taking a running cluster over (``[recovery]
scheduler_restarts``, docs/recovery.md): the rendezvous of the nodes that re-register with
their reports, the state it adopts from them, and a late re-registration answered while
running.

What is checked and adopted is decided by the pure :class:`~.rebuild.Rebuild`; this module
receives, welcomes and sets the scheduler's parts (its table, liveness, rounds and
policies). It holds the :class:`~.service.Scheduler` it works for (wiring only).
"""
from __future__ import annotations

import logging
import time

from netstorm.geoserver.core import roles, wire
from netstorm.geoserver.config.settings import MAX_EARLY_MESSAGES
from netstorm.geoserver.core.nodes import WORKER, NodeInfo, NodeTable

from .liveness import ClusterAborted
from .policy import needs_measurement
from .rebuild import Rebuild, RebuildError

__all__ = ["SchedulerRebuilding"]

log = logging.getLogger("netstorm.scheduler")
PROGRESS_S = 10.0     # at most this long between "rebuilding: ..." lines while nodes report


class SchedulerRebuilding:
    """See the module doc. ``scheduler``: the :class:`~.service.Scheduler` it works for."""

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.rebuilt_at: float | None = None    # when the cluster was taken over (None: not)

    def run(self, first: wire.Message, deadline: float, earlier=()) -> NodeTable:
        """The rendezvous of a running cluster, from its first report (``first``) until
        every node of the cluster file re-registered or is known to have finished, by
        ``deadline`` (the rendezvous's ``timeout_s``); then the state adopted and every
        node welcomed. ``earlier``: fresh REGISTER metas accepted before the first report
        (restarted workers). With ``worker_restarts`` a worker that does not come back is
        handled as lost (awaited back for ``timeout_s`` more) and a fresh REGISTER in its
        place takes it back into its rank after the takeover. :class:`ClusterAborted`
        naming the nodes still missing, or why the reports cannot be taken over."""
        s = self.scheduler
        rebuild = Rebuild(s.config.dcs)
        held = [wire.Message(wire.Kind.REGISTER, meta=m, origin=m["dc"]) for m in earlier]
        log.warning("a node reports a running cluster: rebuilding it from the nodes' reports "
                    "(waiting up to %gs for all of them)", max(0.0, deadline - time.monotonic()))
        msg, every = first, min(PROGRESS_S, s.config.timeout_s / 4)
        next_progress = time.monotonic() + every
        while True:
            if msg is not None:
                self._take(rebuild, msg, held)
            if set(rebuild.missing()) <= rebuild.restarted([m.meta for m in held]):
                break               # everyone reported, finished, or restarted
            s._check_stop()
            if time.monotonic() >= next_progress:     # never silent while waiting
                log.info("rebuilding: %d nodes reported; missing: %s", len(rebuild.reports),
                         rebuild.describe_missing())
                next_progress += every
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._give_up(rebuild)
                break
            msg = s.van.recv(max(0.0, min(remaining, s.config.heartbeat_s,
                                          next_progress - time.monotonic())))
            if msg is not None and msg.kind != wire.Kind.REGISTER:
                s._drops.log(msg.sender, "ignored %s from node %d while the cluster is "
                             "rebuilt", msg.kind.name, msg.sender)
                msg = None
        return self._adopt(rebuild, held)

    def _take(self, rebuild: Rebuild, msg: wire.Message, held: list) -> None:
        """A REGISTER while rebuilding: a report taken, or a restarted worker's fresh one
        held (with worker_restarts, at most MAX_EARLY_MESSAGES), or refused."""
        s = self.scheduler
        problem = roles.register_refusal(msg.meta, msg.origin)
        if not problem and "report" not in msg.meta and s.config.worker_restarts and \
                msg.meta.get("role") == WORKER and len(held) < MAX_EARLY_MESSAGES:
            held.append(msg)
            log.info("held the registration of a worker of %s until the cluster is rebuilt",
                     msg.meta.get("dc"))
            return
        problem = problem or rebuild.add(msg.meta)
        if problem:
            s._reject(msg, problem)

    def _give_up(self, rebuild: Rebuild) -> None:
        """``timeout_s`` passed: workers still missing (that a server's report lists) are
        handled as lost with ``worker_restarts``; anything else aborts naming them."""
        s = self.scheduler
        missing, listed = rebuild.missing(), rebuild.listed()
        if s.config.worker_restarts and all(i in listed for i in missing):
            return
        reason = (f"a new scheduler waited timeout_s = {s.config.timeout_s:g}s for the "
                  f"running cluster's nodes to re-register; still missing: "
                  f"{rebuild.describe_missing(missing)}")
        s._abort_nodes([r.node for r in rebuild.reports.values()], reason)
        raise ClusterAborted(reason)

    def _adopt(self, rebuild: Rebuild, held: list) -> NodeTable:
        """Take the cluster over: the table, the finished workers, the policies and rounds
        the servers reported; every node welcomed (``rebuilt``), a server lacking a
        version it will need sent it, the latest open round opened again everywhere; the
        workers that did not come back lost, the ``held`` REGISTERs then taken (back into
        their ranks, as while running)."""
        s = self.scheduler
        try:
            plan = rebuild.policies()
            table = rebuild.table(s.van.address)
        except RebuildError as exc:
            s._abort_nodes([r.node for r in rebuild.reports.values()], str(exc))
            raise ClusterAborted(f"cannot take the running cluster over: {exc}") from exc
        s.table = s.liveness.table = table
        s.liveness.finished.update(rebuild.finished())
        if needs_measurement(s.config):     # the measured rates died with the old scheduler
            s.policies.rounds.first_policy(plan.latest)
            s.policies.log("rebuilt")
        else:
            s._start_adaptation(plan.latest, None)
        rounds = s.policies.rounds
        for policy in plan.book.by_version.values():
            rounds.announced.add(policy)
        rounds.policy = plan.latest
        now = time.monotonic()
        for server, rnd in rebuild.rounds().items():
            rounds.report(server, rnd, now)
        rounds.opened = rebuild.opened()
        s._welcome([table[i] for i in sorted(rebuild.reports)], plan.latest, rebuilt=True)
        for i in sorted(rebuild.finished() & set(rebuild.reports)):
            self.acknowledge_bye(table[i])      # it said BYE to the old one, or meant to
        for server, policies in plan.resend.items():
            for policy in policies:
                s.van.send(server, wire.Message(wire.Kind.POLICY,
                                                meta={"policy": policy.to_json()}))
        if s.round_gate and rounds.opened:
            s._broadcast_servers(wire.Kind.ROUND_OPEN, {}, seq=rounds.opened)
        if s.policies.adaptation is not None:
            s.policies.send_routes()
        self.rebuilt_at = now
        finished = sorted(table[i].rank for i in rebuild.finished())
        log.warning("took the running cluster over from %d reports: policy %d (from round "
                    "%d) of %d held, latest round %d, round %d open%s%s", len(rebuild.reports),
                    plan.latest.version, plan.latest.start_round, len(plan.book.by_version),
                    rounds.latest, rounds.opened,
                    f"; finished ranks {finished}" if finished else "",
                    "; sent " + ", ".join(f"{table[i].dc} {len(p)} version(s) it lacked"
                                          for i, p in plan.resend.items())
                    if plan.resend else "")
        s.stats({"t": round(now, 3), "event": "rebuilt", "nodes": len(rebuild.reports),
                 "version": plan.latest.version, "round": rounds.latest,
                 "opened": rounds.opened})
        for i in rebuild.missing():
            if not s.liveness.lose(i, "did not re-register with the new scheduler", False):
                reason = (f"{table.describe(i)} did not re-register with the new scheduler "
                          f"and cannot be awaited (worker_restarts)")
                s._abort_nodes([table[j] for j in sorted(rebuild.reports)], reason)
                raise ClusterAborted(reason)
        for msg in held:
            s._on_register(msg)
        return table

    def acknowledge_bye(self, worker: NodeInfo) -> None:
        """Tell a worker its clean BYE was heard (a WORKER_LEFT naming it): with
        scheduler restarts a finishing worker waits for it, and says BYE again to a new
        scheduler otherwise (geoserver/worker/takeover.py)."""
        self.scheduler.van.send(worker.id, wire.Message(wire.Kind.WORKER_LEFT, meta={
            "rank": worker.rank, "pushes": [], "who": worker.describe()}))

    def rewelcome(self, msg: wire.Message) -> None:
        """A REGISTER with a report while running: a node that took this scheduler for
        dead (or missed its WELCOME) is welcomed again if it is the node of the table it
        claims to be, from that node's key and address; anything else is dropped, logged."""
        s = self.scheduler
        try:
            node = NodeInfo.from_json(msg.meta["report"]["node"])
        except (KeyError, TypeError, ValueError) as exc:
            s._drops.log(msg.origin, "dropped a malformed re-registration: %s", exc)
            return
        known = s.table.nodes.get(node.id)
        problem = roles.register_refusal(msg.meta, msg.origin) or (
            "" if known is not None and known == node and msg.meta.get("dc") == node.dc
            else f"it claims to be {node.describe()} at {node.address}, which the table "
                 f"does not hold")
        if not problem and node.id in s.departing.departed_nodes:  # its DC left the run
            s.departing.tell_left(node.id)
            return
        if not problem and (node.id in s.lost and not s.liveness.revive(node.id) or
                            node.id in s.finished):
            problem = f"{node.describe()} is lost or finished"
        if problem:
            s._drops.log(msg.origin, "dropped a re-registration: %s", problem)
            return
        s._welcome([known], s.rounds.policy, rebuilt=True)
