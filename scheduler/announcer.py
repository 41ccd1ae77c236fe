"""The WAN policy as the scheduler announces it, for its loop
(:class:`~netstorm.scheduler.service.Scheduler`): the first policy and the WAN it was
planned on, new policy versions (re-planned with ``adapt``, or random ones in the test
mode), the rounds it opens for every server (``round_gate``) and the multipath relays.

Which rounds are open and from which round a policy applies is decided by the pure
:class:`~netstorm.scheduler.rounds.RoundTracker`; when to re-plan by
:class:`~netstorm.scheduler.awareness.Adaptation`. Everything goes to every server through
``broadcast(kind, meta, seq=0)``; every decision is logged to ``stats`` (JSON lines).
"""
from __future__ import annotations

import logging
import time

from netstorm.geoserver.core import wire

from .awareness import Adaptation, Replanner
from .policy import NOMINAL_MODEL_BYTES, planning_topology
from .rounds import RoundTracker

__all__ = ["PolicyAnnouncer"]

log = logging.getLogger("netstorm.scheduler")


class PolicyAnnouncer:
    """The policies announced to the servers and the rounds opened (see the module doc).
    ``round_gate``: servers start a round only once it is open, and a re-planned policy
    starts at the first round not yet open - the very next round, with no lead and no race
    (it is on exactly when re-planning is)."""

    def __init__(self, config, round_gate: bool, stats, broadcast):
        self.config, self.round_gate, self.stats = config, round_gate, stats
        self.broadcast = broadcast
        self.rounds = RoundTracker(round_gate, config.heartbeat_s)
        self.adaptation: Adaptation | None = None
        self.wan_topology = None        # the WAN as planned on (declared or measured)
        self.model_bytes = 0            # the model's size, as servers report it (metrics)

    def start(self, policy, measured) -> None:
        """Once the first policy is set: log it, keep the WAN it was planned on (servers
        choose detours by its rates) and, with ``adapt`` (multi-root policies only), start
        re-planning from the servers' reports."""
        self.rounds.first_policy(policy)
        self.log("initial")
        if self.config.links or measured:
            self.wan_topology = planning_topology(self.config, measured)
        if not self.round_gate:          # the round gate is on exactly when re-planning is
            return
        replanner = Replanner(NOMINAL_MODEL_BYTES, self.config.chunk_bytes,
                              self.config.replan_threshold, self.config.min_dwell_s,
                              split=self.config.trees == "split")
        replanner.switched(time.monotonic())
        self.adaptation = Adaptation(self.wan_topology, replanner, self.stats,
                                     multipath=self.config.multipath)

    def log(self, reason: str, predicted_s=None) -> None:
        policy = self.rounds.policy
        self.stats({"t": round(time.monotonic(), 3), "event": "policy", "reason": reason,
                    "version": policy.version, "start_round": policy.start_round,
                    "round": self.rounds.latest, "predicted_s": predicted_s,
                    "trees": [{**t.to_json(), "share": round(s, 4)}
                              for t, s in zip(policy.trees, policy.shares)]})

    def report(self, sender: int, dc: str, meta: dict) -> None:
        """A server's heartbeat carries its round (and, with adapt, its link estimates)."""
        reported = int(meta["round"])
        now = time.monotonic()
        self.rounds.report(sender, reported, now)
        size = meta.get("model_bytes", 0)       # logged once known (the metrics' bound)
        if size and size != self.model_bytes:
            self.model_bytes = size
            self.stats({"t": round(now, 3), "event": "model", "bytes": size})
        if self.adaptation is not None:
            self.adaptation.on_report(dc, meta, now)
        if self.round_gate:
            self.open_round(reported)

    def adapt(self) -> None:
        """With ``adapt``, when due: re-plan, announce a better policy, send new routes."""
        if self.adaptation is None or not self.adaptation.due(time.monotonic()):
            return
        plan = self.adaptation.tick(self.rounds.policy, time.monotonic(), self.rounds.latest,
                                    self.rounds.round_seen, self.rounds.announced.for_round)
        if plan is not None:
            self.announce(plan.policy.trees, plan.shares, lead_rounds=1)
            self.log("re-planned", round(plan.predicted_s, 4))
        self.send_routes()

    def open_round(self, rnd: int) -> None:
        """A server wants to start round ``rnd``: from now on every policy it could use is
        final, so open it everywhere. A policy announced before this went out first on the
        same connections, so every server knows it before the round opens."""
        if rnd <= self.rounds.opened:
            return
        before = self.rounds.policy_in_force()
        self.rounds.open(rnd)
        self.broadcast(wire.Kind.ROUND_OPEN, {}, seq=rnd)
        now_in_force = self.rounds.policy_in_force()
        self.stats({"t": round(time.monotonic(), 3), "event": "round_open", "round": rnd,
                    "version": now_in_force.version})
        if self.adaptation is not None and now_in_force is not before:
            self.send_routes()              # relays for the trees now carrying chunks

    def send_routes(self) -> None:
        """Multipath relays (and the rates detours choose by) when they changed."""
        routes = self.adaptation.routes(self.rounds.policy_in_force())
        if routes is None:
            return
        self.broadcast(wire.Kind.ROUTES, routes)
        self.stats({"t": round(time.monotonic(), 3), "event": "routes",
                    "relays": routes["relays"]})

    def announce(self, trees, shares, lead_rounds: int = 3):
        """Send a new policy version to every server. With ``round_gate`` it is in force from
        the first round not yet open. Otherwise from
        :meth:`~netstorm.scheduler.rounds.RoundTracker.rounds_ahead`: ahead of time, so every DC
        switches at the same round boundary without a barrier; a server that gets it too
        late aborts the run with a clear error rather than disagree with the others."""
        policy = self.rounds.next_policy(trees, shares, lead_rounds, time.monotonic())
        self.broadcast(wire.Kind.POLICY, {"policy": policy.to_json()})
        log.info("announced policy %d from round %d%s", policy.version, policy.start_round,
                 f" (round {self.rounds.opened} open)" if self.round_gate else "")
        return policy
