"""scheduler.rounds: rounds reported and opened, and from which round a new policy applies;
no sockets, time passed in."""
from netstorm.geoserver.policy.tree import Tree
from netstorm.scheduler.policy import star_policy
from netstorm.scheduler.rounds import ROUNDS_SEEN, RoundTracker

DCS = ["a", "b"]
OTHER = (Tree("b", {"a": "b", "b": None}),)


def tracker(round_gate: bool) -> RoundTracker:
    rounds = RoundTracker(round_gate, heartbeat_s=0.5)
    rounds.first_policy(star_policy(DCS, "a"))
    return rounds


def test_reports_keep_the_latest_round_and_when_each_was_first_seen():
    rounds = tracker(False)
    assert rounds.latest == 0 and rounds.current_round() == 0
    rounds.report(1, 3, 10.0)
    rounds.report(2, 5, 11.0)
    rounds.report(1, 4, 12.0)              # a slower server: the latest stays 5
    assert rounds.latest == 5 and rounds.current_round() == 5
    assert rounds.round_seen == {3: 10.0, 5: 11.0}
    assert list(rounds.round_log) == [(10.0, 3), (11.0, 5), (12.0, 5)]
    for r in range(6, 6 + 2 * ROUNDS_SEEN):
        rounds.report(1, r, float(r))
    assert len(rounds.round_seen) == ROUNDS_SEEN and max(rounds.round_seen) == r


def test_a_round_opens_once_and_the_gate_counts_opened_rounds():
    rounds = tracker(True)
    rounds.report(1, 4, 0.0)
    assert rounds.current_round() == 0     # reported, not yet open
    assert rounds.open(2) is True and rounds.open(2) is False and rounds.open(1) is False
    assert rounds.opened == 2 and rounds.current_round() == 2


def test_with_the_gate_a_new_policy_starts_at_the_first_round_not_open():
    rounds = tracker(True)
    rounds.open(3)
    second = rounds.next_policy(OTHER, (1.0,), lead_rounds=5, now=0.0)
    assert (second.version, second.start_round) == (2, 4)
    assert rounds.policy is second and rounds.policy_in_force().version == 1
    rounds.open(4)
    assert rounds.policy_in_force() is second
    third = rounds.next_policy(star_policy(DCS, "a").trees, (1.0,), lead_rounds=1, now=0.0)
    assert (third.version, third.start_round) == (3, 5)
    assert sorted(rounds.announced.by_version) == [2, 3]    # version 1 never applies again


def test_a_new_policy_never_starts_before_the_previous_one():
    rounds = tracker(False)
    far = rounds.next_policy(OTHER, (1.0,), lead_rounds=10, now=0.0)
    assert far.start_round == 11
    assert rounds.next_policy(OTHER, (1.0,), lead_rounds=1, now=0.0).start_round == 11


def test_without_the_gate_a_policy_starts_beyond_what_the_fastest_dc_can_reach():
    rounds = tracker(False)
    assert rounds.rounds_ahead(1, now=0.0) == 2     # nothing reported: the round after next
    for i in range(21):                   # 10 rounds/s over the last 2 s
        rounds.report(1, 1 + i, 0.1 * i)
    # margin 2 x 0.5 s + 1 s = 2 s at 10 rounds/s: 20 rounds beyond round 21, plus one
    assert rounds.rounds_ahead(1, now=2.0) == 21 + 20 + 1
    assert rounds.rounds_ahead(3, now=2.0) == 21 + 20 + 3
    policy = rounds.next_policy(OTHER, (1.0,), lead_rounds=3, now=2.0)
    assert (policy.version, policy.start_round) == (2, 44)
    assert rounds.policy_in_force().version == 1


def test_the_round_rate_counts_only_recent_reports():
    rounds = tracker(False)
    for i in range(21):
        rounds.report(1, 1 + i, 0.1 * i)
    # 100 s later the old reports say nothing about the rate: the round after next
    assert rounds.rounds_ahead(1, now=102.0) == 21 + 2


def test_a_replay_policy_keeps_the_trees_and_overrides_what_was_announced_after_it():
    rounds = tracker(True)
    first = rounds.policy
    rounds.open(6)
    later = rounds.next_policy(OTHER, (1.0,), lead_rounds=1, now=0.0)     # from round 7
    replay = rounds.replay_policy(5)              # with the trees in force at round 5
    assert (replay.version, replay.start_round, replay.trees) == (3, 5, first.trees)
    assert rounds.announced.for_round(9) is replay and rounds.policy is replay
    assert rounds.next_policy(OTHER, (1.0,), lead_rounds=1, now=0.0).start_round == 7
