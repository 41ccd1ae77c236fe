"""StepBalancer: esync's local step counts from passively timed rounds."""
import pytest

from netstorm.geoserver.server.esync import StepBalancer

FAST, SLOW = 1, 2


def play_round(balancer, rnd, start, seconds_per_step):
    """Each worker gets the value after round ``rnd - 1`` at ``start`` and pushes round
    ``rnd`` after its given steps; returns the steps each is given after ``rnd``."""
    for worker in seconds_per_step:
        balancer.on_reply(worker, rnd - 1, start)
    for worker, seconds in seconds_per_step.items():
        balancer.on_push(worker, rnd, start + seconds * balancer.given(worker, rnd - 1))
        balancer.on_push(worker, rnd, start + 99.0)     # later keys of the round: not timed
    return {w: balancer.steps(w, rnd) for w in seconds_per_step}


def test_a_worker_three_times_faster_is_given_three_steps():
    balancer = StepBalancer(max_steps=8)
    assert balancer.steps(FAST, 0) == 1 and balancer.steps(SLOW, 0) == 1   # nothing timed
    given = play_round(balancer, 1, 10.0, {FAST: 0.5, SLOW: 1.5})
    assert given == {FAST: 3, SLOW: 1}
    assert balancer.step_s[FAST] == pytest.approx(0.5)
    # the next round is timed over the 3 steps it was given: still 0.5 s each
    given = play_round(balancer, 2, 20.0, {FAST: 0.5, SLOW: 1.5})
    assert given == {FAST: 3, SLOW: 1}
    assert balancer.step_s[FAST] == pytest.approx(0.5)
    assert balancer.slowest_here() == pytest.approx(1.5)


def test_steps_are_fixed_once_given_bounded_and_follow_the_cluster_slowest():
    balancer = StepBalancer(max_steps=4)
    play_round(balancer, 1, 0.0, {FAST: 0.1, SLOW: 0.2})
    assert balancer.steps(FAST, 1) == 2
    balancer.cluster_slowest = 5.0      # another DC's worker is far slower
    assert balancer.steps(FAST, 1) == 2     # every key of round 1 says the same
    assert balancer.steps(FAST, 2) == 4 and balancer.steps(SLOW, 2) == 4   # max_steps


def test_a_push_without_a_timed_value_before_it_is_not_measured():
    balancer = StepBalancer(max_steps=8)
    balancer.on_push(FAST, 3, 5.0)          # no value after round 2 was seen
    assert FAST not in balancer.step_s and balancer.steps(FAST, 3) == 1
