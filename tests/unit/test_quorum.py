"""scheduler/quorum.py: which DCs a quorum round completes with, when, and their weights."""
import math

import pytest

from netstorm.scheduler import quorum as q
from netstorm.scheduler.quorum import QuorumError, QuorumRounds

WORKERS = {"a": 2, "b": 2, "c": 1}


def test_quorum_round_waits_for_every_dc_within_the_grace_and_closes_without_the_late():
    rounds = QuorumRounds(WORKERS, min_dcs=2, grace_s=0.5)
    assert rounds.ready("a", 1, 10.0) == []         # one DC: no window yet
    assert rounds.deadline() is None
    assert rounds.ready("b", 1, 10.2) == []         # the window opens at the 2nd
    assert rounds.deadline() == pytest.approx(10.7)
    (decision,) = rounds.ready("c", 1, 10.6)        # all in: decided at once
    assert (decision.round, decision.weights, decision.total) == (1, WORKERS, 5)
    rounds.ready("c", 2, 11.0)
    rounds.ready("a", 2, 11.1)
    assert rounds.due(11.5) == []
    (decision,) = rounds.due(11.6)                  # closed without b
    assert decision.weights == {"a": 2, "c": 1}
    assert rounds.ready("b", 2, 11.7) == []         # a round decided: too late, ignored
    for dc in ("a", "b", "c"):
        out = rounds.ready(dc, 3, 12.0)
    assert out[0].weights == {"a": 2, "b": 4, "c": 1}    # b carries rounds 2 and 3
    assert rounds.late == 1 and rounds.decided == 3


def test_quorum_of_a_late_dc_over_several_rounds_weighs_every_round_it_missed():
    rounds = QuorumRounds({"a": 1, "b": 3}, min_dcs=1, grace_s=0.1)
    for rnd in (1, 2, 3):
        rounds.ready("a", rnd, rnd)
        (decision,) = rounds.due(rnd + 0.2)
        assert decision.weights == {"a": 1}
    rounds.ready("a", 4, 4.0)
    (decision,) = rounds.ready("b", 4, 4.05)
    assert decision.weights == {"a": 1, "b": 12}


def test_quorum_grace_waits_for_everyone_until_measured_then_follows_lags_and_periods():
    rounds = QuorumRounds({"a": 1, "b": 1, "c": 1}, min_dcs=2)
    assert rounds.grace() == math.inf
    t = 0.0
    for rnd in range(1, q.MEASURED_ROUNDS + 1):     # c 0.1 s after the window opens
        rounds.ready("a", rnd, t)
        rounds.ready("b", rnd, t)
        assert rounds.due(t + 1000.0) == []         # not measured yet: waits for c
        rounds.ready("c", rnd, t + 0.1)
        t += 2.0
    assert rounds.grace() == pytest.approx(q.GRACE_FACTOR * 0.1)
    rounds.ready("a", 9, t)     # a round number ahead of the next is kept for its turn
    assert rounds.deadline() is None


def test_quorum_grace_is_at_most_a_share_of_the_round_period_and_at_least_the_floor():
    rounds = QuorumRounds({"a": 1, "b": 1}, min_dcs=1)
    t = 0.0
    for rnd in range(1, 5):                         # b 0.9 s late, rounds 1 s apart
        rounds.ready("a", rnd, t)
        rounds.ready("b", rnd, t + 0.9)
        t += 1.0
    assert rounds.grace() == pytest.approx(q.GRACE_SHARE * 1.0)
    even = QuorumRounds({"a": 1, "b": 1}, min_dcs=2)
    for rnd in range(1, 5):
        even.ready("a", rnd, rnd)
        even.ready("b", rnd, rnd)
    assert even.grace() == q.GRACE_FLOOR_S
    assert QuorumRounds({"a": 1, "b": 1}, 1, grace_s=3.0).grace() == 3.0


def test_quorum_weighs_what_a_behind_dc_offers_and_ignores_offers_of_nothing_new():
    """A DC behind offers fewer DC rounds than the WAN round's number: its weight is its
    workers times the rounds offered since the last it contributed."""
    rounds = QuorumRounds({"a": 1, "b": 2}, min_dcs=1, grace_s=0.1)
    rounds.ready("a", 1, 0.0)
    rounds.due(1.0)                                 # b left out of round 1
    assert rounds.ready("b", 2, 1.1, through=3) == []   # ahead of the round: ignored
    assert rounds.ready("b", 2, 1.1, through=1) == []
    assert rounds.ready("a", 2, 1.12) == []         # b behind: it may still catch up
    (decision,) = rounds.due(1.25)
    assert decision.weights == {"a": 1, "b": 2}     # b's round 1 in WAN round 2
    assert rounds.ready("b", 3, 2.0, through=1) == []   # nothing new: ignored
    rounds.ready("b", 3, 2.0, through=2)
    rounds.ready("b", 3, 2.01, through=3)           # raised before the decision
    (decision,) = rounds.ready("a", 3, 2.05)
    assert decision.weights == {"a": 1, "b": 4}     # b's rounds 2 and 3: caught up


def test_quorum_decisions_are_made_in_round_order_and_strangers_are_ignored():
    rounds = QuorumRounds({"a": 1, "b": 1}, min_dcs=1, grace_s=1.0)
    assert rounds.ready("zz", 1, 0.0) == []
    rounds.ready("a", 1, 0.0)
    (one,) = rounds.due(5.0)
    assert one.round == 1 and one.to_meta() == {"weights": {"a": 1}}


@pytest.mark.parametrize("workers, min_dcs, message", [
    ({"a": 1, "b": 1}, 3, r"\[sync\] quorum = 3: must be 1\.\.2"),
    ({"a": 1, "b": 1}, 0, r"quorum = 0"),
    ({}, 1, "need DCs with workers"),
    ({"a": 0}, 1, "need DCs with workers"),
])
def test_quorum_settings_that_cannot_work_are_refused_naming_them(workers, min_dcs, message):
    with pytest.raises(QuorumError, match=message):
        QuorumRounds(workers, min_dcs)


def test_quorum_ready_heard_after_the_window_closed_is_late_even_if_not_yet_closed():
    """The loop may take a READY before it closed a window that is already due: the
    window closes first, without it."""
    rounds = QuorumRounds({"a": 1, "b": 1, "c": 1}, min_dcs=2, grace_s=1.0)
    rounds.ready("a", 1, 0.0)
    rounds.ready("b", 1, 0.0)
    (decision,) = rounds.ready("c", 1, 1.5)
    assert decision.weights == {"a": 1, "b": 1}


def test_quorum_needs_at_most_the_dcs_still_running_once_others_finished():
    """a and b finished: c, behind, completes its last rounds alone."""
    rounds = QuorumRounds({"a": 1, "b": 1, "c": 1}, min_dcs=2, grace_s=5.0)
    rounds.ready("a", 1, 0.0)
    rounds.ready("b", 1, 0.0)
    (one,) = rounds.due(6.0)
    assert one.weights == {"a": 1, "b": 1}
    assert rounds.finished("a", 6.1) == []
    assert rounds.ready("c", 2, 6.2, through=1) == []   # c behind: may catch up
    assert rounds.finished("b", 6.3) == []
    (two,) = rounds.ready("c", 2, 6.4, through=2)        # caught up: no one else to wait for
    assert two.weights == {"c": 2}
