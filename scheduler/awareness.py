"""Network awareness in the scheduler: the current view of every WAN link, and when to re-plan.

Servers report inbound link estimates and stalled outbound links on their heartbeats
(:mod:`netstorm.geoserver.server.wan.link_monitor`,
:meth:`netstorm.geoserver.server.wan.send_queue.SendQueue.stalled`); :class:`LinkRates` keeps the
latest per direction, starting from the cluster file's rates (or the start-up measurement).
:class:`Replanner` decides when the policy in force is worth replacing: when, under the fresh
estimates, it is predicted more than ``threshold`` slower than the best policy, for at least
``confirm_s``, and the last switch is at least ``min_dwell_s`` old (no flapping). Pure logic with an
explicit clock; the scheduler process feeds it.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from .planning import compute_policy, link_loads
from .topology import Link, Topology
from .trust import EstimateTrust, predicted_s

__all__ = ["Adaptation", "Decision", "Estimate", "LinkRates", "RATES_MOVED", "Replanner",
           "STALLED_MBPS", "safe_start_round"]

STALLED_MBPS = 0.01     # the rate a stalled direction is planned with when it cannot be left
RATES_MOVED = 0.1       # re-plan only when some rate moved this much (relative) since the last


@dataclass
class Estimate:
    mbps: float
    at: float | None        # when it was measured (None: declared, never measured)
    stalled: bool = False


class LinkRates:
    """Every declared link direction's latest rate. O(1) per observation."""

    def __init__(self, topology: Topology):
        self.base = topology
        self.rates = {d: Estimate(mbps, None) for d, mbps in topology.rates().items()}

    def observe(self, src: str, dst: str, mbps: float, age_s: float, now: float) -> bool:
        """A measured rate of ``src -> dst``, ``age_s`` old at ``now``. Unknown directions
        and non-finite or negative values are ignored (False)."""
        known = self.rates.get((src, dst))
        if known is None or not (mbps >= 0 and age_s >= 0) or mbps == float("inf"):
            return False
        at = now - age_s
        if known.at is not None and at <= known.at:
            return False         # not newer than what we have (a stall counts as news)
        self.rates[(src, dst)] = Estimate(float(mbps), at)
        return True

    def observe_stall(self, src: str, dst: str, now: float) -> bool:
        """``src`` reports its messages to ``dst`` stuck: the direction counts as failed
        until a measurement made after now says otherwise. True if that is news."""
        known = self.rates.get((src, dst))
        if known is None or known.stalled:
            return False
        self.rates[(src, dst)] = Estimate(STALLED_MBPS, now, stalled=True)
        return True

    def forget(self, dc: str, now: float) -> None:
        """``dc``'s server was replaced: what was measured of its links while it was down
        says nothing about them. They are back at their declared rates, and only
        measurements made after ``now`` count. O(links)."""
        base = self.base.rates()
        for (a, b) in self.rates:
            if dc in (a, b):
                self.rates[(a, b)] = Estimate(base[(a, b)], now)

    def stalled(self) -> list:
        return sorted(d for d, e in self.rates.items() if e.stalled)

    def topology(self) -> Topology:
        """The WAN as it is now. A link with a stalled direction is left out while the
        others still connect every DC; otherwise it stays, at :data:`STALLED_MBPS`.
        O(E + n)."""
        links, failed = [], []
        for link in self.base.links:
            ab, ba = self.rates[(link.a, link.b)], self.rates[(link.b, link.a)]
            (failed if ab.stalled or ba.stalled else links).append(
                Link(link.a, link.b, ab.mbps, ba.mbps, link.latency_ms))
        graph = nx.Graph()
        graph.add_nodes_from(self.base.dcs)
        graph.add_edges_from((l.a, l.b) for l in links)
        for link in failed:
            if not nx.is_connected(graph):
                links.append(link)
                graph.add_edge(link.a, link.b)
        return Topology(self.base.name, tuple(self.base.dcs), tuple(links))

    def snapshot(self, now: float) -> dict:
        """``{"a->b": [Mbit/s, age s or None, stalled]}`` for the stats log."""
        return {f"{a}->{b}": [round(e.mbps, 3), None if e.at is None else round(now - e.at, 3),
                              e.stalled] for (a, b), e in sorted(self.rates.items())}


@dataclass
class Decision:
    switch: bool
    current_s: float        # the policy in force, predicted under the fresh estimates
    best_s: float
    plan: object = None     # the better PolicyPlan when switch


class Replanner:
    """Hysteresis for policy switches: a relative ``threshold`` and a ``min_dwell_s`` (the
    cluster file's ``replan_threshold`` and ``min_dwell_s``, whose defaults live there);
    ``split``: whether re-planned policies may use split trees (``[wan] trees``)."""

    def __init__(self, model_bytes: float, chunk_bytes: float, threshold: float,
                 min_dwell_s: float, confirm_s: float = 1.0, split: bool = True):
        if threshold < 0 or min_dwell_s < 0 or confirm_s < 0:
            raise ValueError(f"threshold, min_dwell_s and confirm_s must be >= 0, got "
                             f"{threshold}, {min_dwell_s}, {confirm_s}")
        self.model_bytes, self.chunk_bytes, self.split = model_bytes, chunk_bytes, split
        self.threshold, self.min_dwell_s, self.confirm_s = threshold, min_dwell_s, confirm_s
        self.last_switch: float | None = None
        self._better_since: float | None = None     # when a switch first looked worth it

    @property
    def pending(self) -> bool:
        """A better policy was seen and awaits confirmation (``confirm_s``)."""
        return self._better_since is not None

    def consider(self, policy, topology: Topology, now: float,
                 urgent: bool = False) -> Decision | None:
        """None while the last switch is younger than ``min_dwell_s`` (unless ``urgent``);
        else the comparison, with ``switch`` set (and the dwell clock restarted) when a
        switch has paid for at least ``confirm_s`` (one noisy estimate is not enough), or
        at once when ``urgent``. A policy whose trees use a link that is gone is predicted
        as infinitely slow. Cost: one :func:`netstorm.scheduler.planning.compute_policy`."""
        if not urgent and self.last_switch is not None and \
                now - self.last_switch < self.min_dwell_s:
            return None
        current = predicted_s(policy, topology, self.model_bytes, self.chunk_bytes)
        plan = compute_policy(topology, self.model_bytes, self.chunk_bytes, split=self.split)
        better = current > plan.predicted_s * (1.0 + self.threshold)
        if not better:
            self._better_since = None
        elif self._better_since is None:
            self._better_since = now
        switch = better and (urgent or now - self._better_since >= self.confirm_s)
        if switch:
            self.last_switch, self._better_since = now, None
        return Decision(switch, current, plan.predicted_s, plan if switch else None)

    def switched(self, now: float) -> None:
        """A switch made elsewhere (e.g. the first policy) starts the dwell clock too."""
        self.last_switch = now


class Adaptation:
    """The scheduler's awareness loop, without the process: heartbeat reports in, policy
    decisions out, every step written to ``stats`` (a callable taking one JSON-ready dict,
    or None). It is :meth:`due` every ``every_s``; a stall report makes it due at once and
    the next tick re-plans, dwell or not (a failed link must be left). Planning (switches
    and relays) sees the estimates only once they explain the rounds' durations
    (:class:`~.trust.EstimateTrust`); until then, the rates it trusted last (at first the
    declared or start-up ones)."""

    def __init__(self, topology: Topology, replanner: Replanner, stats=None,
                 every_s: float = 1.0, multipath: bool = False):
        self.rates = LinkRates(topology)
        self.replanner = replanner
        self.trust = EstimateTrust(topology.rates(), replanner.model_bytes,
                                   replanner.chunk_bytes)
        self.multipath = multipath
        self._relays = None
        self.stats = stats or (lambda record: None)
        self.every_s = every_s
        self._next = 0.0
        self._urgent = False
        self.training_since = None      # when a server first reported a round >= 1
        self._considered = None         # (policy version, rates) the last plan saw
        self.plans = 0                  # compute_policy calls made (for the stats)

    def on_report(self, dc: str, meta: dict, now: float) -> None:
        """A server's heartbeat meta: ``round``, ``links`` {src: [Mbit/s, age]} into
        ``dc``, ``stalled`` [dst, ...] out of it. Malformed entries are ignored, and so are
        estimates made before training started (the first report of a round >= 1): start-up
        (every process importing MXNet at once, initial values spreading) says little about
        the links."""
        rnd = meta.get("round")
        if self.training_since is None and isinstance(rnd, int) and rnd >= 1:
            self.training_since = now
        links = meta.get("links")
        if isinstance(links, dict) and self.training_since is not None:
            for src, value in links.items():
                if isinstance(value, list) and len(value) == 2 and \
                        all(isinstance(v, (int, float)) for v in value) and \
                        now - value[1] >= self.training_since:
                    self.rates.observe(str(src), dc, float(value[0]), float(value[1]), now)
        stalled = meta.get("stalled")
        if isinstance(stalled, list):
            for dst in stalled:
                if self.rates.observe_stall(dc, str(dst), now):
                    self._urgent = True

    def due(self, now: float) -> bool:
        """Time for a :meth:`tick`: ``every_s`` passed, or a link newly stalled."""
        return now >= self._next or self._urgent

    def planning_topology(self) -> Topology:
        """The WAN as planning sees it: stalls as reported, every other direction at its
        trusted rate. O(links)."""
        return self.trust.view(self.rates.topology(), self.rates.stalled())

    def tick(self, policy, now: float, round_now: int, round_seen: dict = None,
             policy_for_round=None):
        """Judge the rounds completed since the last tick (``round_seen``: round -> when
        first reported; ``policy_for_round(k)``: the policy round k ran; without them no
        estimate is ever trusted), then compare ``policy`` with the best under the trusted
        rates (and log them): the new PolicyPlan when it should be replaced, else None."""
        self._next = now + self.every_s
        urgent, self._urgent = self._urgent, False      # a failed link: leave it now
        if round_seen is not None:
            for record in self.trust.on_rounds(round_seen, policy_for_round,
                                               self.rates.topology(), self.rates.stalled(),
                                               now):
                self.stats({"t": round(now, 3), **record})
        topology = self.planning_topology()
        rates = topology.rates()
        seen_version, seen_rates = self._considered or (None, {})
        if urgent or self.replanner.pending or policy.version != seen_version or \
                _moved(rates, seen_rates):
            decision = self.replanner.consider(policy, topology, now, urgent=urgent)
            if decision is not None:            # None: still dwelling, ask again next tick
                self._considered = (policy.version, rates)
                self.plans += 1
        else:
            decision = None     # same policy, same rates: the last plan found nothing better
        self.stats({"t": round(now, 3), "event": "rates", "round": round_now,
                    "rates": self.rates.snapshot(now),
                    **({} if decision is None else
                       {"current_s": round(decision.current_s, 4),
                        "best_s": round(decision.best_s, 4)})})
        return decision.plan if decision is not None and decision.switch else None

    def forget(self, dc: str, now: float) -> None:
        """``dc``'s server was replaced: its links' estimates are reset
        (:meth:`LinkRates.forget`) and the next :meth:`routes` is sent whatever it holds
        (the new server has none yet)."""
        self.rates.forget(dc, now)
        self.trust.forget(dc, self.rates.base.rates())
        self._relays = None

    def routes(self, policy) -> dict | None:
        """With multipath: the ROUTES meta for ``policy`` under the current rates, when it
        differs from the last one sent (else None). Rates go along for detours."""
        if not self.multipath:
            return None
        from .multipath import plan_relays, to_json
        topology = self.planning_topology()
        rates = topology.rates()
        try:
            busy = link_loads(policy, topology, self.replanner.model_bytes)
        except ValueError:          # the policy uses a link that is gone: wait for the next
            return None
        relays = to_json(plan_relays(busy, rates))
        if self._relays is not None and _same_relays(relays, self._relays):
            return None
        self._relays = relays
        return {"relays": relays, "rates": [[a, b, round(m, 3)] for (a, b), m in rates.items()]}


def _moved(rates: dict, before: dict, by: float = RATES_MOVED) -> bool:
    """Whether a direction appeared, went, or changed by more than ``by`` (relative).
    O(directions)."""
    return rates.keys() != before.keys() or any(
        abs(mbps - before[d]) > by * before[d] for d, mbps in rates.items())


def _same_relays(a: list, b: list, tolerance: float = 0.05) -> bool:
    """Equal routes up to ``tolerance`` in every fraction (not worth a message otherwise)."""
    return len(a) == len(b) and all(x[:3] == y[:3] and abs(x[3] - y[3]) <= tolerance
                                    for x, y in zip(a, b))


def safe_start_round(latest: int, first_seen: dict, now: float, margin_s: float) -> int:
    """The first round a policy announced at ``now`` can start at without any DC having
    begun it under the old policy: the next one (``latest + 1``) when the current round is
    young enough that no DC can start the next within ``margin_s`` (the announcement's way
    plus the age of the round reports), judged as half a typical round past the current
    round's start; otherwise the one after. ``first_seen``: round -> when some DC was first
    reported in it. Rounds of uneven length only make it pick ``latest + 2`` more often.
    O(rounds remembered)."""
    starts = sorted((r, t) for r, t in first_seen.items() if r <= latest)
    durations = [b[1] - a[1] for a, b in zip(starts, starts[1:]) if b[0] == a[0] + 1]
    if latest not in first_seen or not durations:
        return latest + 2
    typical = sorted(durations)[len(durations) // 2]
    young = now + margin_s < first_seen[latest] + 0.5 * typical
    return latest + (1 if young else 2)
