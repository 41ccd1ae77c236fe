"""scheduler/departing.py: a DC whose node died leaves an elastic run; the members that
remain freeze, report and replay over themselves."""
import time

import pytest

from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import NodeTable
from netstorm.geoserver.policy.tree import Policy
from netstorm.scheduler.announcer import PolicyAnnouncer
from netstorm.scheduler.departing import TELL_EVERY_S, DcDeparting, DcDeparture
from netstorm.scheduler.liveness import ClusterAborted, Liveness
from netstorm.scheduler.policy import star_policy
from fakes import RecordingVan, three_dc_table

D1, D2, D3 = "1" * 64, "2" * 64, "3" * 64


def _departing(min_dcs=2, rejoins=0):
    config = pseudo_cluster(3, 1, 1, min_dcs=min_dcs, rejoins=rejoins)
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


def _left_told(van) -> list:
    return sorted(n for n, kind, meta in van.sent if kind == wire.Kind.ABORT and meta["left"])


def test_a_silent_dc_that_may_come_back_leaves_at_its_learnt_deadline_and_is_told():
    """With rejoins, a node silent past its learnt deadline (far below dead_after_s) makes
    its DC leave at once instead of being awaited (which stalls every DC); its places are
    held for its processes started anew, and its nodes are told, in their sockets, and
    again (at most every TELL_EVERY_S) whenever one speaks."""
    departing, liveness, van = _departing(rejoins=2)
    liveness.leaves_for_now = lambda node_id: departing.membership.may_come_back(
        liveness.table[node_id].dc)
    held = []
    departing.on_left = lambda dc, nodes: held.append((dc, sorted(nodes)))
    now = time.monotonic()
    for beat in range(20):                      # dc2's server beat every 0.1 s
        liveness._silence.heard(3, now - 20.0 + beat * 0.1)
    learnt, bound = liveness.deadline(3), liveness.config.dead_after_s
    assert learnt < bound
    liveness.last_seen = {n: now for n in range(1, 7)}
    liveness.last_seen[3] = now - (learnt + bound) / 2      # past its learnt deadline only
    liveness.check(None)
    assert departing.membership.members == ("dc0", "dc1") and not liveness.lost.lost
    assert held == [("dc2", [3, 6])] and _left_told(van) == [3, 6]
    departing.tell_left(6)                      # it speaks again at once: told already
    assert _left_told(van) == [3, 6]
    departing.told[6] -= TELL_EVERY_S
    departing.tell_left(6)
    assert _left_told(van) == [3, 6, 6]


def test_dcs_silent_together_leave_together_or_one_after_the_other():
    """dc1 goes silent while the members still report dc2's departure: one departure of
    both, the replay over dc0 alone. Once a plan was sent, a DC that goes leaves next."""
    departing, liveness, van = _departing(min_dcs=1)
    assert departing.depart(3, "silent", busy=False)
    departing.on_state_report("dc1", {"keys": [[0, 7, D1]]})
    assert departing.depart(2, "silent", busy=False)        # folded in
    assert departing.current.lost_dcs == ("dc1", "dc2")
    departing.on_state_report("dc0", {"keys": [[0, 6, D1]]})
    replays = [n for n, kind, _ in van.sent if kind == wire.Kind.REPLAY]
    assert replays == [1] and departing.policies.rounds.policy.members == ("dc0",)
    assert departing.on_recovered("dc0") and departing.current is None

    departing, liveness, van = _departing(min_dcs=1)
    departing.depart(3, "silent", busy=False)
    for dc in ("dc0", "dc1"):
        departing.on_state_report(dc, {"keys": [[0, 7, D1]]})
    van.sent.clear()
    assert departing.depart(2, "silent", busy=False)        # after the plan: next
    assert departing.next == ["dc1"] and departing.current.survivors == {"dc0"}
    assert departing.on_recovered("dc0")                    # dc1 is not awaited
    assert departing.current.lost_dcs == ("dc1",) and departing.next == []
    assert [n for n, kind, _ in van.sent if kind == wire.Kind.RECOVER] == [1]
