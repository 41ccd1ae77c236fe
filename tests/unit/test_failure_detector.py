"""The adaptive silence deadline (geoserver/core/failure_detector.py): fed arrival times, it
notices a stopped node within about a second, never a healthy one under jitter, and waits
longer on long links and after long gaps; dead_after_s stays the bound."""
import random

import pytest

from netstorm.geoserver.core.failure_detector import (GAP_FACTOR, MIN_REGULAR, WINDOW,
                                                      ArrivalHistory, FailureDetector)


def _verdict_after_stop(detector, node, last: float, step: float = 0.01) -> float:
    """How long after ``last`` (its last arrival) a loop looking every ``step`` seconds
    presumes ``node`` dead."""
    t = last
    while t - last <= detector.deadline(node):
        t += step
    return t - last


def _beats(detector, node, start: float, count: int, every: float, jitter: float = 0.0,
           rng=None) -> float:
    t = start
    for _ in range(count):
        t += every + (rng.uniform(0, jitter) if rng else 0.0)
        detector.heard(node, t)
    return t


def test_a_stopped_node_heard_regularly_is_noticed_within_about_a_second():
    detector = FailureDetector(dead_after_s=10.0, heartbeat_s=0.5, floor_s=1.0)
    last = _beats(detector, "n", 0.0, 40, 0.5)
    assert detector.deadline("n") == pytest.approx(1.0)
    assert 1.0 <= _verdict_after_stop(detector, "n", last) <= 1.05


def test_during_start_up_and_with_the_floor_off_the_deadline_is_dead_after_s():
    detector = FailureDetector(dead_after_s=10.0, heartbeat_s=0.5, floor_s=1.0)
    assert detector.deadline("never heard") == 10.0
    t = _beats(detector, "n", 0.0, MIN_REGULAR, 0.5)       # the first arrival has no gap
    assert not detector.regular("n") and detector.deadline("n") == 10.0
    detector.heard("n", t + 0.5)
    assert detector.regular("n") and detector.deadline("n") < 10.0
    off = FailureDetector(dead_after_s=10.0, heartbeat_s=0.5, floor_s=0.0)
    _beats(off, "n", 0.0, 50, 0.5)
    assert off.deadline("n") == 10.0


@pytest.mark.parametrize("seed", range(20))
def test_no_false_verdict_under_jitter_and_a_starved_gap_raises_the_bar(seed):
    """Beats every 0.5 s with up to 0.4 s of jitter, and now and then a node starved for
    0.9 s: at every moment before the next arrival, the silence stays under the deadline
    (checked against the deadline as it stood, as the scheduler would)."""
    rng = random.Random(seed)
    detector = FailureDetector(dead_after_s=10.0, heartbeat_s=0.5, floor_s=1.0)
    t = _beats(detector, "n", 0.0, MIN_REGULAR, 0.5)
    for i in range(400):
        gap = 0.5 + rng.uniform(0, 0.4) + (0.9 if i in (50, 60) else 0.0)
        if i != 50:         # jitter, and a starved gap once one was seen (i = 60)
            assert gap < detector.deadline("n"), (i, gap, detector.deadline("n"))
        t += gap
        detector.heard("n", t)
    assert detector.deadline("n") < 10.0


def test_the_longest_recent_gap_raises_the_deadline_until_it_leaves_the_window():
    detector = FailureDetector(dead_after_s=10.0, heartbeat_s=0.5, floor_s=1.0)
    t = _beats(detector, "n", 0.0, 20, 0.5)
    t += 1.5                            # starved once
    detector.heard("n", t)
    assert detector.deadline("n") >= GAP_FACTOR * 1.5
    _beats(detector, "n", t, WINDOW, 0.5)
    assert detector.deadline("n") == pytest.approx(1.0)


@pytest.mark.parametrize("rtt, at_least", [(0.04, 0.66), (0.2, 1.3), (0.4, 2.1), (3.0, 10.0)])
def test_a_long_link_waits_a_few_round_trips_and_dead_after_s_stays_the_bound(rtt, at_least):
    detector = FailureDetector(dead_after_s=10.0, heartbeat_s=0.5, floor_s=0.5)
    _beats(detector, "n", 0.0, 40, 0.5)
    detector.note_rtt("n", rtt)
    assert detector.deadline("n") >= min(at_least, 10.0)
    assert detector.deadline("n") <= 10.0


def test_the_round_trip_estimate_follows_a_slower_link_at_once_and_a_faster_one_slowly():
    detector = FailureDetector(10.0, 0.5, 1.0)
    detector.note_rtt("n", 0.1)
    detector.note_rtt("n", 0.4)
    assert detector.rtt("n") == 0.4
    detector.note_rtt("n", 0.0)
    assert 0.2 < detector.rtt("n") < 0.4
    for bad in (-1.0, float("nan"), float("inf")):
        detector.note_rtt("n", bad)
    assert 0.2 < detector.rtt("n") < 0.4


def test_a_forgotten_node_starts_anew():
    detector = FailureDetector(10.0, 0.5, 1.0)
    _beats(detector, "n", 0.0, 40, 0.5)
    detector.note_rtt("n", 0.3)
    detector.forget("n")
    assert detector.deadline("n") == 10.0 and detector.rtt("n") == 0.0


def test_arrival_history_keeps_a_window_of_gaps_and_their_moments():
    history = ArrivalHistory(0.0)
    for t in (1.0, 2.0, 4.0):
        history.add(t)
    assert list(history.gaps) == [1.0, 1.0, 2.0]
    assert history.mean == pytest.approx(4 / 3) and history.longest == 2.0
    assert history.stddev == pytest.approx((2 / 9) ** 0.5)
    history.add(3.0)                    # a clock going backwards: a gap of 0
    assert history.gaps[-1] == 0.0
    for t in range(5, 5 + WINDOW):
        history.add(float(t))
    assert len(history.gaps) == WINDOW and history.longest == 1.0
    assert history.mean == pytest.approx(1.0) and history.stddev == pytest.approx(0.0, abs=1e-6)
