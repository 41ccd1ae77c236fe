"""scheduler/departing.py: a DC whose node died leaves an elastic run; the members that
remain freeze, report and replay over themselves."""
import time

import pytest

from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import NodeTable
from netstorm.geoserver.policy.tree import Policy
from netstorm.scheduler.announcer import PolicyAnnouncer
from netstorm.scheduler.departing import DcDeparting, DcDeparture
from netstorm.scheduler.liveness import ClusterAborted, Liveness
from netstorm.scheduler.policy import star_policy
from fakes import RecordingVan, three_dc_table

D1, D2, D3 = "1" * 64, "2" * 64, "3" * 64


def _departing(min_dcs=2):
    config = pseudo_cluster(3, 1, 1, min_dcs=min_dcs)
    van = RecordingVan()
    liveness = Liveness(config, van, check_stop=lambda: None)
    liveness.table = NodeTable(three_dc_table())
    policies = PolicyAnnouncer(config, False, lambda record: None, lambda *a, **k: None)
    policies.start(star_policy(["dc0", "dc1", "dc2"], "dc0"), None)
    departing = DcDeparting(config, van, lambda record: None, policies, liveness)
    liveness.depart = lambda node_id, why: departing.depart(node_id, why, False)
    return departing, liveness, van


def test_a_dead_dc_leaves_its_members_freeze_and_replay_over_themselves():
    departing, liveness, van = _departing()
    liveness.last_seen = {n: time.monotonic() for n in range(1, 7)}
    liveness.last_seen[3] -= 3600                       # dc2's server: silent for an hour
    liveness.check(None)                                # no abort: dc2 leaves
    assert departing.membership.members == ("dc0", "dc1")
    assert departing.departed_nodes == {3, 6} and {3, 6} <= liveness.finished
    assert 3 not in liveness.last_seen and 6 not in liveness.last_seen
    assert sorted(n for n, kind, _ in van.sent if kind == wire.Kind.RECOVER) == [1, 2]
    assert {meta["version"] for _, kind, meta in van.sent if kind == wire.Kind.RECOVER} == {2}
    van.sent.clear()
    assert departing.on_state_report("dc0", {"keys": [[0, 7, D1], [1, 6, D2]]})
    assert not van.sent                                  # dc1 has not reported yet
    departing.on_state_report("dc1", {"keys": [[0, 7, D1], [1, 7, D3]]})
    replays = [(n, meta) for n, kind, meta in van.sent if kind == wire.Kind.REPLAY]
    assert [n for n, _ in replays] == [1, 2]             # never to the departed server
    policy = Policy.from_json(replays[0][1]["policy"], ["dc0", "dc1", "dc2"], elastic=True)
    # from the round after every round applied everywhere
    assert (policy.version, policy.start_round, policy.members) == (2, 8, ("dc0", "dc1"))
    assert replays[0][1]["keys"] == [[0, 7, ["dc0", "dc1"], D1], [1, 7, ["dc1"], D3]]
    assert departing.policies.rounds.policy == policy
    assert departing.on_recovered("dc0") and departing.current is not None
    assert departing.on_recovered("dc1") and departing.current is None


def test_a_departed_dc_s_worker_failing_later_is_no_news_and_a_worker_s_death_also_departs():
    departing, liveness, van = _departing()
    bye = wire.Message(wire.Kind.BYE, sender=5, meta={"clean": False, "reason": "killed"})
    liveness.bye(bye, replacing=False, esync=False)     # dc1's worker: dc1 leaves
    assert departing.membership.members == ("dc0", "dc2") and 2 in liveness.finished


def test_below_min_dcs_or_during_another_recovery_the_run_aborts_naming_the_node():
    departing, liveness, _ = _departing(min_dcs=3)
    liveness.last_seen = {3: time.monotonic() - 3600}
    with pytest.raises(ClusterAborted, match=r"server of dc2 .*presumed dead"):
        liveness.check(None)
    departing, liveness, _ = _departing()
    assert departing.depart(3, "died", busy=False)
    assert not departing.depart(2, "died", busy=False)  # one departure at a time
    departing, _, _ = _departing()
    assert not departing.depart(3, "died", busy=True)   # a server is being replaced


def test_a_departure_waits_only_for_the_members_and_names_the_late_ones():
    gone = DcDeparture("dc2", {"dc0", "dc1"}, deadline=10.0)
    gone.report("dc0", [[0, 3, D1]])
    assert gone.overdue(11.0) == "no state report from the servers of dc1"
    gone.report("dc1", [[0, 3, D1]])
    gone.make_plan()
    assert not gone.back("dc0")
    assert gone.overdue(11.0) == "the servers of dc1 did not recover"
    assert gone.back("dc1")
