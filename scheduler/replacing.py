"""The scheduler's side of replacing a lost DC server (docs/recovery.md), for its loop
(:class:`~netstorm.scheduler.service.Scheduler`).

A new server process registered for a lost one: it is welcomed with the table and no policy
yet; every other server and the DC's workers learn its address (NODE_MOVED); the survivors
freeze and report their replicas (RECOVER, STATE_REPORT); once all reported, every server
gets the replay plan and policy (REPLAY); once every DC is back (RECOVERED) the run goes on.
The decisions (the plan, who is back, until when) are the pure
:class:`~netstorm.scheduler.replacement.ServerReplacement`; one runs at a time
(:attr:`ServerReplacing.current`). Each step is O(nodes + keys).
"""
from __future__ import annotations

import logging
import time

from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import SCHEDULER, SERVER, NodeInfo

from .liveness import ClusterAborted
from .replacement import RecoveryError, ServerReplacement

__all__ = ["ServerReplacing"]

log = logging.getLogger("netstorm.scheduler")


class ServerReplacing:
    """Replacing a lost DC server: ``policies`` (the
    :class:`~netstorm.scheduler.announcer.PolicyAnnouncer`) replays, ``liveness`` says who
    finished, ``welcome(nodes, policy, rejoined)`` sends a node the table."""

    def __init__(self, config, van, stats, policies, liveness, welcome):
        self.config, self.van, self.stats = config, van, stats
        self.policies, self.liveness, self.welcome = policies, liveness, welcome
        self.current: ServerReplacement | None = None   # a lost DC server being replaced

    def replace(self, node: NodeInfo, meta: dict) -> None:
        """A new server process for a lost one: it gets the table with no policy yet; every
        other server and the DC's workers learn its address; the survivors freeze and
        report, and the replay follows their reports."""
        table = self.liveness.table
        table.nodes[node.id] = node
        self.van.disconnect(node.id)
        self.welcome([node], None, rejoined=True)
        moved = wire.Message(wire.Kind.NODE_MOVED, meta={"node": node.to_json()})
        for other in table.nodes.values():
            if other.id != node.id and other.id not in self.liveness.finished and (
                    other.role == SERVER or other.dc == node.dc and other.role != SCHEDULER):
                self.van.send(other.id, moved)
        survivors = [n for n in table.nodes.values() if n.role == SERVER and n is not node
                     and n.id not in self.liveness.finished]    # elastic: members only
        version = self.policies.rounds.policy.version + 1
        if self.policies.adaptation is not None:     # its links looked dead while it was
            self.policies.adaptation.forget(node.dc, time.monotonic())
        self.current = ServerReplacement(node.dc, {n.dc for n in survivors},
                                         time.monotonic() + self.config.timeout_s)
        for other in survivors:
            self.van.send(other.id, wire.Message(wire.Kind.RECOVER,
                                                 meta={"dc": node.dc, "version": version}))
        log.warning("%s rejoined at %s (pid %s on %s): the %d other servers freeze and "
                    "report their replicas", node.describe(), node.address, meta.get("pid"),
                    node.host, len(survivors))
        self.stats({"t": round(time.monotonic(), 3), "event": "replace", "dc": node.dc})

    def on_state_report(self, dc: str, meta: dict) -> None:
        """A survivor in ``dc`` reported the keys of its replica (``meta``); once all did,
        every server gets the replay plan (:class:`ClusterAborted` if there is none)."""
        if self.current is None:
            return
        self.current.report(dc, meta["keys"])
        if not self.current.reported:
            return
        try:
            plan = self.current.make_plan()
        except RecoveryError as exc:
            raise ClusterAborted(f"replacing the server of {self.current.lost_dc}: "
                                 f"{exc}") from exc
        rounds = self.policies.rounds
        policy = rounds.replay_policy(self.current.start_round)
        self.policies.broadcast(wire.Kind.REPLAY, {
            "policy": policy.to_json(), "opened": rounds.opened,
            "keys": [[k, r, list(holders), d] for k, (r, holders, d) in sorted(plan.items())]})
        self.policies.log("replay")
        log.info("replay policy %d from round %d for %d keys", policy.version,
                 policy.start_round, len(plan))

    def on_recovered(self, dc: str) -> None:
        """The server of ``dc`` is back; once every DC is, the replacement is over."""
        if self.current is None or not self.current.back(dc):
            return
        took = time.monotonic() - (self.current.deadline - self.config.timeout_s)
        log.warning("the server of %s was replaced in %.1fs; every DC replays from its "
                    "planned rounds", self.current.lost_dc, took)
        self.stats({"t": round(time.monotonic(), 3), "event": "replaced",
                    "dc": self.current.lost_dc, "seconds": round(took, 3)})
        self.current = None
        if self.policies.adaptation is not None:
            self.policies.send_routes()
