"""What the scheduler's ``/metrics`` shows (docs/operations.md): a prometheus_client
custom collector over the scheduler's decisions and the rounds.

Decisions come from the records the scheduler writes to its ``stats`` stream
(:meth:`SchedulerMetrics.observe`, called by the stats sink on the scheduler's own
thread): every policy announced (re-plans counted), the planning rates it was made on,
each link's latest estimate (the ``rates`` records of network awareness), servers
replaced. So the link series show exactly what the stats file logged. The rounds servers
report, the restarts granted and the policy in force are read from the scheduler's parts
when Prometheus scrapes, on the endpoint's thread: each table is copied before it is
read, and the loop never waits. With the model's size known (a ``model`` record), the
last round's time is set against the cut lower bound
(:func:`~netstorm.scheduler.planning.cut_lower_bound_s`) of the WAN as last estimated.

O(links + DCs + nodes + policies) per scrape; the bound O(2^DCs · DCs²) up to 22 DCs
(:mod:`~netstorm.scheduler.planning.cut_bound`), computed once per estimate and size."""
from __future__ import annotations

import collections

from netstorm.geoserver.core.metrics import Families, link_name

from .planning import cut_lower_bound_s

__all__ = ["PLANNED_KEPT", "SchedulerMetrics"]

PLANNED_KEPT = 16       # policy versions whose planning rates are kept


class SchedulerMetrics:
    """Feed it the stats records (:meth:`observe`), give it the scheduler once built
    (:meth:`attach`); register it with a registry to serve it."""

    def __init__(self):
        self.scheduler = None
        self.estimates: dict = {}       # "a->b" -> (Mbit/s, age s or None, stalled)
        self.estimated_rates: dict = {}  # (a, b) -> Mbit/s, of the same record
        self.planned: dict = {}         # policy version -> {(a, b): Mbit/s} (None: the WAN
                                        # as first planned on)
        self.announced = 0              # the latest policy version announced
        self.replans = 0
        self.replaced = collections.Counter()   # dc -> its server replaced (completed)
        self.model_bytes = None
        self.audit = collections.Counter()      # replica audits: rounds, mismatches, errors
        self._bound = (None, None)      # (what it was computed for, seconds)

    def attach(self, scheduler) -> None:
        self.scheduler = scheduler

    # ------------------------------------------------------------ the stats stream
    def observe(self, record: dict) -> None:
        """One stats record (on the scheduler's thread). O(links) for a ``rates`` or
        ``policy`` record, O(1) otherwise."""
        event = record.get("event")
        if event == "policy":
            self._on_policy(record)
        elif event == "rates":
            estimates = {name: tuple(value) for name, value in record["rates"].items()}
            self.estimated_rates = {tuple(name.split("->", 1)): value[0]
                                    for name, value in estimates.items()}
            self.estimates = estimates          # replaced whole: a scrape sees one record
        elif event == "replaced":
            replaced = collections.Counter(self.replaced)   # replaced whole, as the others
            replaced[record["dc"]] += 1
            self.replaced = replaced
        elif event == "model":
            self.model_bytes = float(record["bytes"])
        elif event == "replica_audit":      # docs/recovery-audit.md
            self.audit = self.audit + collections.Counter(
                rounds=1, mismatches=len(record["mismatches"]),
                count_errors=len(record["count_errors"]))

    def _on_policy(self, record: dict) -> None:
        version = int(record["version"])
        self.announced = max(self.announced, version)
        if record.get("reason") == "re-planned":
            self.replans += 1
        announcer = getattr(self.scheduler, "policies", None)
        adaptation = getattr(announcer, "adaptation", None)
        planned = dict(self.planned)
        # the first policy was planned on the WAN as declared or measured, which the
        # announcer keeps only once the record is written: read it at scrape time
        planned[version] = None if adaptation is None or record.get("reason") == "initial" \
            else adaptation.planning_topology().rates()
        for old in sorted(planned)[:-PLANNED_KEPT]:
            del planned[old]
        self.planned = planned

    # ------------------------------------------------------------ a scrape
    def collect(self):
        out = Families({"role": "scheduler"})
        scheduler = self.scheduler
        out.gauge("netstorm_policy_version_announced", "the latest policy version "
                  "announced", self.announced or None)
        out.counter("netstorm_replans", "policies re-planned from the links' estimates",
                    self.replans)
        for name, (mbps, age, stalled) in sorted(self.estimates.items()):
            out.gauge("netstorm_link_estimated_mbps", "the scheduler's latest estimate of "
                      "the link's rate (network awareness), Mbit/s", mbps, link=name)
            out.gauge("netstorm_link_estimate_age_seconds", "how old that estimate was "
                      "when logged (absent: the declared rate, never measured)", age,
                      link=name)
            out.gauge("netstorm_link_stalled", "1 while the link is reported stalled",
                      int(bool(stalled)), link=name)
        for dc, count in sorted(self.replaced.items()):
            out.counter("netstorm_server_replacements", "a lost DC server replaced from a "
                        "peer's replica", count, dc=dc)
        audit = self.audit
        if audit["rounds"]:
            out.counter("netstorm_replica_audits", "rounds whose replica digests the "
                        "scheduler compared across DCs", audit["rounds"])
            out.counter("netstorm_replica_mismatches", "(key, round)s whose replicas "
                        "differed between DCs", audit["mismatches"])
            out.counter("netstorm_replica_count_errors", "a DC's optimizer update count of a "
                        "key off its rounds (a lost or doubled update)", audit["count_errors"])
        if scheduler is not None and scheduler.table is not None:
            self._rounds(scheduler, out)
            self._restarts(scheduler, out)
            self._steps(scheduler, out)
        return out.all()

    def _rounds(self, scheduler, out: Families) -> None:
        rounds = scheduler.rounds
        by_server = dict(rounds.rounds)
        seen = dict(rounds.round_seen)
        nodes = dict(scheduler.table.nodes)
        out.gauge("netstorm_round", "the latest round any DC's server reported",
                  max(by_server.values(), default=0))
        if rounds.round_gate:
            out.gauge("netstorm_round_opened", "the latest round the scheduler opened "
                      "(adapt: servers start a round once it is open)", rounds.opened)
        for server, rnd in sorted(by_server.items()):
            node = nodes.get(server)
            if node is not None:
                out.gauge("netstorm_dc_round", "the latest round each DC's server "
                          "reported (the slowest DC is the lowest)", rnd, dc=node.dc)
        done = [r for r in seen if r + 1 in seen]
        if done:
            last = max(done)
            seconds = seen[last + 1] - seen[last]
            out.gauge("netstorm_rounds_completed", "rounds completed (the next one "
                      "started somewhere)", last)
            out.gauge("netstorm_round_seconds", "how long the last completed round "
                      "took, from its first report to the next round's", seconds)
            bound = self._cut_bound_s(scheduler)
            if bound:
                out.gauge("netstorm_round_cut_bound_seconds", "the cut lower bound of one "
                          "round on the WAN as last estimated: no policy is faster", bound)
                out.gauge("netstorm_round_bound_ratio", "the last round's time over the "
                          "cut lower bound (1 is the physical limit)", seconds / bound)
        current = rounds.opened if rounds.round_gate else max(by_server.values(), default=0)
        version = _version_for(list(rounds.announced.by_version.values()), current)
        out.gauge("netstorm_policy_version", "the policy version in force for the "
                  "current round", version)
        planned = self._planned_rates(scheduler, version)
        for (a, b), mbps in sorted(planned.items()):
            out.gauge("netstorm_link_planned_mbps", "the link's rate the policy in force "
                      "was planned with, Mbit/s", mbps, link=link_name(a, b))

    def _planned_rates(self, scheduler, version) -> dict:
        if version is None or version not in self.planned:
            return {}
        rates = self.planned[version]
        if rates is None:
            wan = scheduler.policies.wan_topology
            rates = {} if wan is None else wan.rates()
        return rates

    def _cut_bound_s(self, scheduler):
        """The cut bound of a round of ``model_bytes`` on the latest estimates (else the
        WAN as planned on); None while either is unknown. Cached per input."""
        wan = scheduler.policies.wan_topology
        if not self.model_bytes or wan is None:
            return None
        known = wan.rates()
        rates = {d: m for d, m in self.estimated_rates.items() if d in known and m > 0}
        key = (self.model_bytes, tuple(sorted(rates.items())))
        if self._bound[0] != key:
            self._bound = (key, cut_lower_bound_s(wan.with_rates(rates), self.model_bytes))
        return self._bound[1]

    def _restarts(self, scheduler, out: Families) -> None:
        nodes = dict(scheduler.table.nodes)
        for node_id, count in sorted(dict(scheduler.lost.used).items()):
            node = nodes.get(node_id)
            if node is not None:
                out.counter("netstorm_restarts", "restarts granted to a lost node (a "
                            "worker back in its rank, a DC server replaced)", count,
                            node=node.role, dc=node.dc,
                            rank="" if node.rank < 0 else node.rank)

    def _steps(self, scheduler, out: Families) -> None:
        for dc, seconds in sorted(dict(scheduler.liveness.step_s).items()):
            out.gauge("netstorm_dc_step_seconds", "esync: each DC's slowest seconds per "
                      "local step (its workers' compute)", seconds, dc=dc)


def _version_for(policies: list, rnd: int):
    """The version of the policy in force for round ``rnd`` among ``policies`` (a copy of
    a :class:`~netstorm.geoserver.policy.tree.PolicyBook`'s), as ``for_round`` chooses;
    None if none covers it. O(policies)."""
    best = None
    for p in policies:
        if p.start_round <= rnd and (best is None or (p.start_round, p.version) >
                                     (best.start_round, best.version)):
            best = p
    return None if best is None else best.version
