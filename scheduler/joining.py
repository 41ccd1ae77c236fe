"""The scheduler's side of a data center joining a running elastic cluster
(docs/recovery-elastic.md), for its loop (:class:`~netstorm.scheduler.service.Scheduler`).

A run that starts with fewer DCs than its cluster file lists holds the places of the
others (:meth:`~.registration.Registration.hold_places`: their nodes are in the table with
the ids and ranks of the file, outside the run). When such a DC's server registers, it
joins as a replacement server does: it is welcomed with the table and no policy, the
members' servers learn its address (NODE_MOVED), freeze and report their replicas
(RECOVER, STATE_REPORT); the plan has the new server copy every key from them (checked by
digest), and every server gets a **replay policy over the members and the new DC** from the
first round not applied everywhere (REPLAY). Its workers are welcomed once its server is
(those that register first wait): they ask their server where to start (RESUME) and push
from the replayed round on. Each step is O(nodes + keys).
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace

from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import SERVER

from .membership import member_policy
from .policy import planning_topology
from .replacement import ServerReplacement

__all__ = ["DcJoining", "placeholder_address"]

log = logging.getLogger("netstorm.scheduler")


def placeholder_address(dc) -> str:
    """Where an absent DC's nodes are said to be until it joins: its server's own address
    from the cluster file (nothing is sent there: its nodes are outside the run)."""
    return f"tcp://{dc.host}:{dc.server_port or 1}"


class DcJoining:
    """DCs joining the run; ``departing`` (:class:`~.departing.DcDeparting`) holds the
    membership and the nodes outside the run, ``welcome(nodes, policy, rejoined)`` sends
    nodes the table."""

    def __init__(self, config, van, stats, policies, liveness, departing, welcome):
        self.config, self.van, self.stats = config, van, stats
        self.policies, self.liveness, self.departing = policies, liveness, departing
        self.welcome = welcome
        self.absent_nodes: set = set()      # node ids of DCs not (yet) in the run
        self.current: ServerReplacement | None = None   # the DC joining now
        self.early: dict = {}               # dc -> REGISTER metas until the DC is complete

    def hold_places(self, absent_dcs) -> set:
        """The run starts without ``absent_dcs`` (their places are in the table): they
        are no members, their nodes outside the run. Their node ids."""
        table = self.liveness.table
        membership = self.departing.membership
        membership.members = tuple(d for d in membership.members if d not in absent_dcs)
        self.absent_nodes = {n.id for n in table.nodes.values() if n.dc in absent_dcs}
        self.liveness.finished |= self.absent_nodes
        return self.absent_nodes

    def first_policy(self, absent_dcs) -> tuple:
        """``(policy, description)``: version 1 over the members (a star, or fapt trees on
        the cluster file's links, :func:`member_policy`) when the run starts without
        ``absent_dcs``."""
        config = self.config
        policy = member_policy(config, self.departing.membership.members, 1, 0,
                               planning_topology(config) if config.links else None)
        return policy, (f"over {', '.join(policy.members)} ({', '.join(absent_dcs)} may "
                        f"join)")

    def hold(self, dc: str, nodes) -> None:
        """``dc`` left the run and may come back (``[elastic] rejoins``): its places are
        held again, as an absent DC's, for its processes started anew. O(nodes)."""
        self.absent_nodes |= set(nodes)
        self.early.pop(dc, None)

    def claims(self, meta: dict) -> bool:
        """Whether a REGISTER is for a place held for an absent DC."""
        return self._place(meta) is not None

    def _place(self, meta: dict):
        table = self.liveness.table
        for node in table.nodes.values():
            if node.id in self.absent_nodes and node.role == meta.get("role") and \
                    node.dc == meta.get("dc") and \
                    (node.role == SERVER or node.local_rank == meta.get("local_index")):
                return node
        return None

    def register(self, meta: dict) -> str:
        """A REGISTER into a held place: kept until its DC's server and every worker
        registered (so the members wait for the copy only, not for processes starting),
        then the DC joins. Why it is refused ("" if taken)."""
        node = self._place(meta)
        local = meta.get("local_address", "")
        if not isinstance(meta.get("address"), str) or not isinstance(local, str) or \
                local and not local.startswith("ipc://"):
            return "registration carries no valid address"
        refusal = self.departing.membership.join_refusal(node.dc)
        if refusal:
            return refusal
        waiting = self.early.setdefault(node.dc, {})
        waiting[(node.role, node.local_rank)] = meta        # a second REGISTER: the latest
        self.start_waiting()
        return ""

    def start_waiting(self) -> None:
        """Start joining a DC whose server and every worker registered, unless another
        change is under way (then it waits, registered, until that one is over: the
        scheduler calls this again). One DC at a time. O(nodes)."""
        if self.busy():
            return
        table = self.liveness.table
        for dc, waiting in list(self.early.items()):
            places = [n for n in table.nodes.values() if n.dc == dc]
            if len(waiting) < len(places):
                continue
            del self.early[dc]
            server = next(n for n in places if n.role == SERVER)
            self._start(self._moved(server, waiting.pop((SERVER, server.local_rank))),
                        waiting)
            return

    def busy(self) -> bool:
        return self.current is not None or self.departing.current is not None

    def _moved(self, node, meta: dict):
        """``node`` at the address its REGISTER gives, in the run from now on."""
        node = replace(node, address=meta["address"], host=str(meta.get("host", "")),
                       local_address=meta.get("local_address", ""))
        self.liveness.table.nodes[node.id] = node
        self.absent_nodes.discard(node.id)
        self.departing.departed_nodes.discard(node.id)    # back after it left
        self.departing.told.pop(node.id, None)
        self.liveness.finished.discard(node.id)
        self.van.disconnect(node.id)
        return node

    def _start(self, node, workers: dict) -> None:
        """The server of a joining DC and its ``workers`` (REGISTER metas by (role, local
        rank)), in this order: every one's address into the table; the members' servers
        learn the server's (NODE_MOVED: before it can send them anything, or they would
        drop the link key it sends) and freeze; the server is welcomed (no policy yet),
        with its workers' addresses already in its table (else it would answer their first
        requests at their held places); then its workers are welcomed."""
        table = self.liveness.table
        joined = [self._moved(self._place(meta), meta) for meta in workers.values()]
        members = [n for n in table.nodes.values() if n.role == SERVER and
                   n.dc in self.departing.membership.members]
        moved = wire.Message(wire.Kind.NODE_MOVED, meta={"node": node.to_json()})
        version = self.policies.rounds.policy.version + 1
        self.current = ServerReplacement(node.dc, {n.dc for n in members},
                                         time.monotonic() + self.config.timeout_s)
        for other in members:
            self.van.send(other.id, moved)
            self.van.send(other.id, wire.Message(wire.Kind.RECOVER, meta={
                "dc": node.dc, "version": version, "change": "joins"}))
        self.welcome([node], None, rejoined=True)
        log.warning("%s joins the run (server at %s on %s): the %d members freeze and "
                    "report their replicas", node.dc, node.address, node.host, len(members))
        self.stats({"t": round(time.monotonic(), 3), "event": "dc_joining", "dc": node.dc})
        for worker in joined:
            self.welcome([worker], self.policies.rounds.policy, rejoined=True)
            log.info("%s joins the run at %s", worker.describe(), worker.address)

    def on_state_report(self, dc: str, meta: dict) -> bool:
        """A member's frozen report; once all did, the plan and a policy over the members
        and the joining DC go to all of them. False: no join is under way."""
        if self.current is None:
            return False
        departing = self.departing
        if departing.reported_plan(self.current, dc, meta, "joining the run") is not None:
            departing.membership.join(self.current.lost_dc)
            departing.replay_over_members(self.current)
        return True

    def on_recovered(self, dc: str) -> bool:
        """A server is back; once every member and the new one are, it has joined."""
        if self.current is None:
            return False
        if self.current.back(dc):
            took = time.monotonic() - (self.current.deadline - self.config.timeout_s)
            log.warning("%s joined the run in %.1fs; %d members", self.current.lost_dc, took,
                        len(self.departing.membership.members))
            self.stats({"t": round(time.monotonic(), 3), "event": "dc_joined",
                        "dc": self.current.lost_dc, "seconds": round(took, 3)})
            self.current = None
        return True
