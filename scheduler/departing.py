"""The scheduler's side of a data center leaving a running elastic cluster
(docs/recovery-elastic.md), for its loop (:class:`~netstorm.scheduler.service.Scheduler`).

A DC leaves when its server (or a worker) is presumed dead or failed and cannot be awaited
back, while at least ``[elastic] min_dcs`` members remain (:class:`Membership`). Its nodes
are done with (never beaten, never awaited, their messages dropped); the other servers
freeze and report their replicas (RECOVER, STATE_REPORT) exactly as for a server
replacement; once all reported, each gets the plan (the most rounds any of them applied,
copied where a survivor is behind) and a **replay policy over the members** (REPLAY, a new
version from the first round replayed): the rounds in flight are summed again without the
departed DC, whose contribution to them is dropped. Once every member is back
(RECOVERED) the run goes on. Each step is O(nodes + keys).

DCs that go silent together (a link cut that isolates two) leave together: one that goes
while the members are still reporting is folded into the departure under way; one that
goes after its plan was sent leaves next, once that departure is over. With ``[elastic]
rejoins`` a departed DC's places stay held (``on_left``) and its processes, when they speak
again, are told it left (an ABORT with ``left``, :meth:`DcDeparting.tell_left`): their
launcher starts them again and the DC joins as a new one (scheduler/joining.py).
"""
from __future__ import annotations

import logging
import time

from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import SERVER

from .liveness import ClusterAborted
from .membership import Membership, MembershipError, member_policy
from .replacement import RecoveryError, ServerReplacement

__all__ = ["DcDeparture", "DcDeparting", "TELL_EVERY_S"]

log = logging.getLogger("netstorm.scheduler")

TELL_EVERY_S = 2.0      # a departed node that keeps speaking is told again this often


class DcDeparture(ServerReplacement):
    """A :class:`ServerReplacement` whose lost DC is not awaited: the members that remain
    report and recover; ``lost_dc`` names the DC that left. Pure."""

    def back(self, dc: str) -> bool:
        if self.plan is not None:
            self.recovered.add(dc)
        return self.plan is not None and self.recovered >= self.survivors

    def also_leaves(self, dc: str) -> bool:
        """``dc``, a survivor, leaves as well: folded in while the members still report
        (True; its report, if any, is not used), else only no longer awaited (False: it
        leaves in a departure of its own afterwards). O(1)."""
        self.survivors.discard(dc)
        if self.plan is not None:
            return False
        self.reports.pop(dc, None)
        self.lost_dcs = tuple(sorted({*self.lost_dcs, dc}))
        return True

    def overdue(self, now: float) -> str:
        if now > self.deadline and self.plan is not None:
            waiting = sorted(self.survivors - self.recovered)
            return f"the servers of {', '.join(waiting)} did not recover"
        return super().overdue(now)


class DcDeparting:
    """DCs leaving the run: ``policies`` (the :class:`~.announcer.PolicyAnnouncer`) replays,
    ``liveness`` holds the nodes' state (a departed DC's nodes join its ``finished``)."""

    def __init__(self, config, van, stats, policies, liveness):
        self.config, self.van, self.stats = config, van, stats
        self.policies, self.liveness = policies, liveness
        self.membership = Membership([dc.name for dc in config.dcs], config.min_dcs,
                                     rejoins=config.rejoins)
        self.departed_nodes: set = set()    # node ids of the DCs that left
        self.current: DcDeparture | None = None
        self.next: list = []                # DCs that left after the current plan was sent
        self.told: dict = {}                # departed node -> when last told its DC left
        # (dc, its node ids) of a DC that left and may come back: its places are held
        self.on_left = lambda dc, nodes: None

    def depart(self, node_id: int, why: str, busy: bool) -> bool:
        """``node_id`` is dead (``why``) and will not be awaited: its whole DC leaves, if
        the cluster is elastic, nothing else is being recovered (``busy``) and enough
        members remain; False when the run must abort instead."""
        table = self.liveness.table
        dc = table[node_id].dc
        if busy or not self.membership.elastic:
            return False
        try:
            members = self.membership.leave(dc, f"lost {table.describe(node_id)}: {why}")
        except MembershipError as exc:
            log.error("%s", exc)
            return False
        gone = {n.id for n in table.nodes.values() if n.dc == dc}
        self.departed_nodes |= gone
        self.liveness.finished |= gone
        back = self.membership.may_come_back(dc)
        for node in gone:
            self.liveness.last_seen.pop(node, None)
            self.told.pop(node, None)
            # a stopped process finds this in its socket when it wakes; a cut-off one
            # hears it when it next speaks (tell_left)
            self.tell_left(node)
        if back:
            self.on_left(dc, gone)
        log.warning("%s %s: %s leaves the run%s; %d DC(s) remain (min_dcs %d): they freeze "
                    "and replay the rounds in flight without it", table.describe(node_id),
                    why, dc, " for the time being (it may rejoin)" if back else "",
                    len(members), self.membership.min_dcs)
        self.stats({"t": round(time.monotonic(), 3), "event": "dc_left", "dc": dc,
                    "members": list(members)})
        if self.current is None:
            self._start((dc,))
        elif self.current.also_leaves(dc):      # folded into the departure under way
            if self.planned(self.current, "leaving the run") is not None:
                self.replay_over_members(self.current)
        else:                                   # it leaves once the current one is over
            self.next.append(dc)
        return True

    def _start(self, dcs) -> None:
        """The members freeze and report, ``dcs`` not awaited. O(nodes)."""
        members = self.membership.members
        survivors = [n for n in self.liveness.table.nodes.values()
                     if n.role == SERVER and n.dc in members]
        version = self.policies.rounds.policy.version + 1
        self.current = DcDeparture(tuple(dcs), {n.dc for n in survivors},
                                   time.monotonic() + self.config.timeout_s)
        for other in survivors:
            self.van.send(other.id, wire.Message(wire.Kind.RECOVER, meta={
                "dc": ", ".join(dcs), "version": version, "change": "leaves"}))

    def tell_left(self, node_id: int) -> None:
        """A node of a DC that left (it was stopped or cut off) is told so in an ABORT
        with ``left``: when it leaves, and whenever it speaks again, at most once every
        :data:`TELL_EVERY_S` (its process ends; with rejoins left its launcher starts the
        DC again and it joins anew). O(1)."""
        now = time.monotonic()
        if now - self.told.get(node_id, -TELL_EVERY_S) < TELL_EVERY_S:
            return
        self.told[node_id] = now
        node = self.liveness.table[node_id]
        why = self.membership.departed.get(node.dc, "it left")
        back = self.membership.may_come_back(node.dc)
        self.van.connect(node.id, node.address, principal=node.dc)
        self.van.send(node.id, wire.Message(wire.Kind.ABORT, meta={
            "reason": f"{node.dc} left the run ({why}); the others went on without it"
                      + ("; start it again to rejoin" if back else ""), "left": True}))
        self.van.disconnect(node.id)
        log.info("%s told that %s left the run%s", node.describe(), node.dc,
                 " (it may rejoin)" if back else "")

    def on_state_report(self, dc: str, meta: dict) -> bool:
        """A member's frozen report; once all did, every member gets the replay plan and a
        policy over the members. False: no departure is under way (not ours)."""
        if self.current is None:
            return False
        if self.reported_plan(self.current, dc, meta, "leaving the run") is not None:
            self.replay_over_members(self.current)
        return True

    def reported_plan(self, change: ServerReplacement, dc: str, meta: dict, what: str):
        """``dc``'s report (``meta``) to a membership ``change``; once all members did, the
        plan (None before; :class:`ClusterAborted` naming the DC and ``what`` if there is
        none). O(keys)."""
        change.report(dc, meta["keys"])
        return self.planned(change, what)

    def planned(self, change: ServerReplacement, what: str):
        """The plan of ``change`` once every member reported (None before;
        :class:`ClusterAborted` naming the DC and ``what`` if there is none). O(keys)."""
        if not change.reported:
            return None
        try:
            return change.make_plan()
        except RecoveryError as exc:
            raise ClusterAborted(f"{change.lost_dc} {what}: {exc}") from exc

    def replay_over_members(self, change: ServerReplacement) -> None:
        """Every member's server gets the plan of ``change`` (a DC leaving, or one joining
        once :meth:`Membership.join` took it in) and a replay policy over the members, a
        new version from the first round replayed. O(members + keys)."""
        plan, rounds = change.plan, self.policies.rounds
        policy = member_policy(self.config, self.membership.members,
                               rounds.policy.version + 1, change.start_round,
                               self.policies.wan_topology)
        rounds.policy = policy
        rounds.announced.replay(policy)
        meta = {"policy": policy.to_json(), "opened": rounds.opened,
                "keys": [[k, r, list(h), d] for k, (r, h, d) in sorted(plan.items())]}
        for server in self.member_servers():
            self.van.send(server.id, wire.Message(wire.Kind.REPLAY, meta=meta))
        self.policies.log("member-replay")
        log.info("replay policy %d over %s from round %d for %d keys", policy.version,
                 ", ".join(self.membership.members), policy.start_round, len(plan))

    def on_recovered(self, dc: str) -> bool:
        """A member is back; once all are, the departure is over. False: not ours."""
        if self.current is None:
            return False
        if self.current.back(dc):
            took = time.monotonic() - (self.current.deadline - self.config.timeout_s)
            log.warning("%s left the run; the %d members went on after %.1fs",
                        self.current.lost_dc, len(self.membership.members), took)
            self.stats({"t": round(time.monotonic(), 3), "event": "dc_gone",
                        "dc": self.current.lost_dc, "seconds": round(took, 3)})
            self.current = None
            if self.next:                       # left while that plan was under way
                dcs, self.next = tuple(self.next), []
                self._start(dcs)
        return True

    def member_servers(self) -> list:
        table = self.liveness.table
        return [n for n in table.nodes.values()
                if n.role == SERVER and n.dc in self.membership.members]
