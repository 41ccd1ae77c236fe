"""The scheduler's side of replacing a lost DC server (docs/recovery.md), for its loop
(:class:`~netstorm.scheduler.service.Scheduler`).

A new server process registered for a lost one: it is welcomed with the table and no policy
yet; every other server and the DC's workers learn its address (NODE_MOVED); the survivors
freeze and report their replicas (RECOVER, STATE_REPORT); once all reported, every server
gets the replay plan and policy (REPLAY); once every DC is back (RECOVERED) the run goes on.
The decisions (the plan, who is back, until when) are the pure
:class:`~netstorm.scheduler.replacement.ServerReplacement`; one runs at a time
(:attr:`ServerReplacing.current`). Each step is O(nodes + keys).

Several servers lost: the replacement starts once no server is awaited any more (each new
one waits, welcomed, in :attr:`ServerReplacing.pending`), as one plan over every lost DC.
A server lost during a replacement puts it on hold (its deadline is the lost server's);
once the new one registered, it starts again under a new policy version, with the DCs
not back yet among the lost: the survivors freeze and report again (one recovered since
is a survivor), and replica messages of the earlier attempt are dropped as stale.
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
        self.pending: set = set()       # DCs whose new server waits for the others lost

    def replace(self, node: NodeInfo, meta: dict) -> None:
        """A new server process for a lost one: it gets the table with no policy yet; every
        other server and the DC's workers learn its address; the survivors freeze and
        report, and the replay follows their reports."""
        table = self.liveness.table
        table.nodes[node.id] = node
        self.van.disconnect(node.id)
        # the others learn its address before it learns theirs: what it then sends them
        # (a link key, an answer to its workers) never finds them at the old one
        moved = wire.Message(wire.Kind.NODE_MOVED, meta={"node": node.to_json()})
        for other in table.nodes.values():
            if other.id != node.id and other.id not in self.liveness.finished and (
                    other.role == SERVER or other.dc == node.dc and other.role != SCHEDULER):
                self.van.send(other.id, moved)
        self.welcome([node], None, rejoined=True)
        if self.policies.adaptation is not None:     # its links looked dead while it was
            self.policies.adaptation.forget(node.dc, time.monotonic())
        self.stats({"t": round(time.monotonic(), 3), "event": "replace", "dc": node.dc})
        self.pending.add(node.dc)
        if self.current is not None:    # a loss during a replacement: those not back
            self.pending |= set(self.current.lost_dcs) - self.current.recovered
            self.current = None
        awaited = self.awaited()
        if awaited:
            log.warning("%s rejoined at %s (pid %s on %s); the servers of %s are awaited "
                        "too: the replacement starts once they are back", node.describe(),
                        node.address, meta.get("pid"), node.host, ", ".join(awaited))
            return
        self._start(node, meta)

    def awaited(self) -> list:
        """The DCs whose lost server has not registered again yet, sorted. O(lost)."""
        return sorted({lost.node.dc for lost in self.liveness.lost.lost.values()
                       if lost.node.role == SERVER})

    def _start(self, node: NodeInfo, meta: dict) -> None:
        """Every lost DC has its new server: the survivors freeze and report."""
        lost, self.pending = self.pending, set()
        survivors = [n for n in self.liveness.table.nodes.values()       # elastic: members
                     if n.role == SERVER and n.dc not in lost
                     and n.id not in self.liveness.finished]
        version = self.policies.rounds.policy.version + 1
        try:
            self.current = ServerReplacement(lost, {n.dc for n in survivors},
                                             time.monotonic() + self.config.timeout_s,
                                             paused=lambda: bool(self.awaited()))
        except RecoveryError as exc:
            raise ClusterAborted(str(exc)) from exc
        for other in survivors:
            self.van.send(other.id, wire.Message(wire.Kind.RECOVER, meta={
                "dc": self.current.lost_dc, "version": version}))
        self._resend_departures(lost)
        log.warning("%s rejoined at %s (pid %s on %s): the %d other servers freeze and "
                    "report their replicas%s", node.describe(), node.address, meta.get("pid"),
                    node.host, len(survivors), f" (servers replaced: {self.current.lost_dc})"
                    if len(lost) > 1 else "")

    def _resend_departures(self, lost) -> None:
        """esync: the new servers of ``lost`` hear again of the workers that finished (the
        rounds after a worker's last go on without it)."""
        table = self.liveness.table
        for meta in self.liveness.departures.values():
            for dc in sorted(lost):
                self.van.send(table.server_of(dc).id,
                              wire.Message(wire.Kind.WORKER_LEFT, meta=meta))

    def repair(self, odd, why: str) -> None:
        """A replica audit found the replicas of the DCs ``odd`` differing from the
        majority's (docs/recovery-audit.md): every server freezes and reports, as for a
        lost server, and the odd DCs copy every key from the majority; no process is
        replaced."""
        table = self.liveness.table
        servers = [n for n in table.nodes.values()      # elastic: members only
                   if n.role == SERVER and n.id not in self.liveness.finished]
        version = self.policies.rounds.policy.version + 1
        odd = sorted(odd)
        self.current = ServerReplacement(odd[0], {n.dc for n in servers},
                                         time.monotonic() + self.config.timeout_s, odd=odd)
        for server in servers:
            self.van.send(server.id, wire.Message(wire.Kind.RECOVER,
                                                  meta={"dc": odd[0], "version": version,
                                                        "repair": True}))
        log.warning("replica audit: %s; the replica of %s is replaced from the majority's: "
                    "the %d servers freeze and report their replicas", why, ", ".join(odd),
                    len(servers))
        self.stats({"t": round(time.monotonic(), 3), "event": "repair", "dcs": odd})

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
            what = f"the replica of {', '.join(sorted(self.current.odd))}" \
                if self.current.odd else f"the server of {self.current.lost_dc}"
            raise ClusterAborted(f"replacing {what}: {exc}") from exc
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
        if self.current.odd:            # a replica audit's repair (docs/recovery.md)
            log.warning("the replica of %s was replaced from the majority's in %.1fs",
                        ", ".join(sorted(self.current.odd)), took)
            self.stats({"t": round(time.monotonic(), 3), "event": "repaired",
                        "dcs": sorted(self.current.odd), "seconds": round(took, 3)})
            self.current = None
            return
        what = f"the server of {self.current.lost_dc} was" if len(self.current.lost_dcs) == 1 \
            else f"the servers of {self.current.lost_dc} were"
        log.warning("%s replaced in %.1fs; every DC replays from its planned rounds", what,
                    took)
        self.stats({"t": round(time.monotonic(), 3), "event": "replaced",
                    "dc": self.current.lost_dc, "seconds": round(took, 3)})
        self.current = None
        if self.policies.adaptation is not None:
            self.policies.send_routes()
