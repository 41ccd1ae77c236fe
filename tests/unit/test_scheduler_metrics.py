"""scheduler/metrics.py: the scheduler's collector fed stats records and read from fake
parts (its live counterpart: tests/cluster/test_metrics.py)."""
from __future__ import annotations

import collections
from types import SimpleNamespace

import pytest

from fakes import sample as value, scraped
from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.core.nodes import NodeInfo
from netstorm.scheduler.announcer import PolicyAnnouncer
from netstorm.scheduler.metrics import SchedulerMetrics
from netstorm.scheduler.planning import cut_lower_bound_s
from netstorm.scheduler.policy import star_policy
from netstorm.scheduler.rounds import RoundTracker
from netstorm.scheduler.topology import Link, Topology

WAN = Topology("test", ("a", "b", "c"), (Link("a", "b", 100.0, 100.0),
                                         Link("b", "c", 50.0, 40.0)))


class FakeAdaptation:
    def __init__(self, rates):
        self.rates = rates

    def planning_topology(self):
        return WAN.with_rates(self.rates)


def fake_scheduler(gate=True, adaptation=None):
    rounds = RoundTracker(gate, 0.1)
    nodes = {0: NodeInfo(0, "scheduler", "", "tcp://s"),
             1: NodeInfo(1, "server", "a", "tcp://a"), 2: NodeInfo(2, "server", "b", "tcp://b"),
             3: NodeInfo(3, "server", "c", "tcp://c"),
             4: NodeInfo(4, "worker", "b", "tcp://w", rank=1, local_rank=0)}
    return SimpleNamespace(
        rounds=rounds, table=SimpleNamespace(nodes=nodes),
        policies=SimpleNamespace(adaptation=adaptation, wan_topology=WAN),
        lost=SimpleNamespace(used=collections.Counter()),
        liveness=SimpleNamespace(step_s={}))


def policy(version, start_round):
    return SimpleNamespace(version=version, start_round=start_round)


def test_link_estimates_are_the_latest_rates_record_whole():
    metrics = SchedulerMetrics()
    metrics.observe({"event": "rates", "rates": {"a->b": [100.0, None, False],
                                                 "b->a": [90.5, 0.25, False]}})
    metrics.observe({"event": "rates", "rates": {"a->b": [80.125, 0.5, False],
                                                 "b->a": [0.01, 1.0, True]}})
    samples = scraped(metrics)
    assert value(samples, "netstorm_link_estimated_mbps", link="a->b") == 80.125
    assert value(samples, "netstorm_link_estimated_mbps", link="b->a") == 0.01
    assert value(samples, "netstorm_link_estimate_age_seconds", link="a->b") == 0.5
    assert value(samples, "netstorm_link_stalled", link="b->a") == 1
    assert value(samples, "netstorm_link_stalled", link="a->b") == 0
    assert all(dict(l)["role"] == "scheduler" for _, l in samples)


def test_an_estimate_never_measured_has_no_age():
    metrics = SchedulerMetrics()
    metrics.observe({"event": "rates", "rates": {"a->b": [100.0, None, False]}})
    samples = scraped(metrics)
    assert value(samples, "netstorm_link_estimated_mbps", link="a->b") == 100.0
    assert value(samples, "netstorm_link_estimate_age_seconds", link="a->b") is None


def test_rounds_their_time_and_each_dc_s_round():
    scheduler = fake_scheduler()
    scheduler.rounds.first_policy(policy(1, 0))
    metrics = SchedulerMetrics()
    metrics.attach(scheduler)
    for server, rnd, t in ((1, 1, 10.0), (2, 1, 10.1), (1, 2, 11.0), (3, 2, 11.2),
                           (1, 3, 12.5)):
        scheduler.rounds.report(server, rnd, t)
        scheduler.rounds.open(rnd)
    samples = scraped(metrics)
    assert value(samples, "netstorm_round") == 3
    assert value(samples, "netstorm_round_opened") == 3
    assert value(samples, "netstorm_rounds_completed") == 2
    assert value(samples, "netstorm_round_seconds") == pytest.approx(1.5)
    assert {d: value(samples, "netstorm_dc_round", dc=d) for d in "abc"} == \
        {"a": 3, "b": 1, "c": 2}
    assert value(samples, "netstorm_round_bound_ratio") is None    # the size is unknown


def test_the_ratio_to_the_cut_bound_once_the_model_s_size_is_known():
    scheduler = fake_scheduler()
    scheduler.rounds.first_policy(policy(1, 0))
    metrics = SchedulerMetrics()
    metrics.attach(scheduler)
    for rnd, t in ((1, 0.0), (2, 3.0)):
        scheduler.rounds.report(1, rnd, t)
    estimates = {"a->b": [100.0, 0.1, False], "b->a": [100.0, 0.1, False],
                 "b->c": [25.0, 0.1, False], "c->b": [40.0, 0.1, False]}
    metrics.observe({"event": "rates", "rates": estimates})
    metrics.observe({"event": "model", "bytes": 5e6})
    bound = cut_lower_bound_s(WAN.with_rates({("b", "c"): 25.0}), 5e6)
    assert bound == pytest.approx(5e6 * 8 / 25e6)          # the b-c cut, at 25 Mbit/s
    samples = scraped(metrics)
    assert value(samples, "netstorm_round_cut_bound_seconds") == pytest.approx(bound)
    assert value(samples, "netstorm_round_bound_ratio") == pytest.approx(3.0 / bound)


def test_policy_in_force_re_plans_and_the_rates_each_was_planned_with():
    adaptation = FakeAdaptation({("b", "c"): 10.0})
    scheduler = fake_scheduler(adaptation=adaptation)
    metrics = SchedulerMetrics()
    metrics.attach(scheduler)
    scheduler.rounds.first_policy(policy(1, 0))
    metrics.observe({"event": "policy", "reason": "initial", "version": 1, "start_round": 0})
    scheduler.rounds.report(1, 1, 0.0)
    scheduler.rounds.open(1)
    scheduler.rounds.announced.add(policy(2, 2))
    metrics.observe({"event": "policy", "reason": "re-planned", "version": 2,
                     "start_round": 2})
    samples = scraped(metrics)
    assert value(samples, "netstorm_policy_version") == 1       # round 2 is not open yet
    assert value(samples, "netstorm_policy_version_announced") == 2
    assert value(samples, "netstorm_replans_total") == 1
    assert value(samples, "netstorm_link_planned_mbps", link="b->c") == 50.0  # as declared
    scheduler.rounds.open(2)
    samples = scraped(metrics)
    assert value(samples, "netstorm_policy_version") == 2
    assert value(samples, "netstorm_link_planned_mbps", link="b->c") == 10.0
    assert value(samples, "netstorm_link_planned_mbps", link="c->b") == 40.0


def test_restarts_replacements_and_esync_step_times():
    scheduler = fake_scheduler()
    scheduler.lost.used.update({4: 2, 2: 1})
    scheduler.liveness.step_s.update({"a": 0.25, "c": 0.5})
    metrics = SchedulerMetrics()
    metrics.attach(scheduler)
    metrics.observe({"event": "replaced", "dc": "b", "seconds": 1.5})
    samples = scraped(metrics)
    assert value(samples, "netstorm_restarts_total", node="worker", dc="b", rank="1") == 2
    assert value(samples, "netstorm_restarts_total", node="server", dc="b", rank="") == 1
    assert value(samples, "netstorm_server_replacements_total", dc="b") == 1
    assert value(samples, "netstorm_dc_step_seconds", dc="c") == 0.5


def test_replica_audits_are_counted_from_their_records():
    """docs/recovery-audit.md: one ``replica_audit`` record per audited round."""
    metrics = SchedulerMetrics()
    assert value(scraped(metrics), "netstorm_replica_audits_total") is None
    metrics.observe({"event": "replica_audit", "round": 10, "keys": 2, "dcs": 3,
                     "mismatches": [], "count_errors": []})
    metrics.observe({"event": "replica_audit", "round": 20, "keys": 2, "dcs": 3,
                     "mismatches": [{"key": 0, "odd": ["c"], "majority": ["a", "b"]},
                                    {"key": 1, "odd": ["c"], "majority": ["a", "b"]}],
                     "count_errors": [{"dc": "c", "key": 0, "updates": 21,
                                       "expected": 20}]})
    samples = scraped(metrics)
    assert value(samples, "netstorm_replica_audits_total") == 2
    assert value(samples, "netstorm_replica_mismatches_total") == 2
    assert value(samples, "netstorm_replica_count_errors_total") == 1


def test_before_the_cluster_is_complete_only_what_was_logged_shows():
    metrics = SchedulerMetrics()
    assert value(scraped(metrics), "netstorm_replans_total") == 0
    scheduler = fake_scheduler()
    scheduler.table = None                  # still in rendezvous
    metrics.attach(scheduler)
    samples = scraped(metrics)
    assert value(samples, "netstorm_round") is None
    assert value(samples, "netstorm_replans_total") == 0


def test_the_model_s_size_on_a_heartbeat_is_logged_once_and_feeds_the_bound():
    """A server's heartbeat naming the model's size (``model_bytes``) is logged as a
    ``model`` record once per size, which the metrics take."""
    stats = []
    announcer = PolicyAnnouncer(pseudo_cluster(2, 1, 1), False, stats.append,
                                lambda kind, meta, seq=0: None)
    announcer.start(star_policy(["dc0", "dc1"], "dc0"), None)
    for meta in ({"round": 1}, {"round": 1, "model_bytes": 4096},
                 {"round": 2, "model_bytes": 4096}, {"round": 3, "model_bytes": 8192}):
        announcer.report(1, "dc0", meta)
    assert [r["bytes"] for r in stats if r["event"] == "model"] == [4096, 8192]
    metrics = SchedulerMetrics()
    for record in stats:
        metrics.observe(record)
    assert metrics.model_bytes == 8192
