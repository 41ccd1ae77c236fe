"""geoserver.round_gate: pushes of rounds the scheduler has not opened wait, without sockets."""
from netstorm.geoserver.server.round_gate import RoundGate


def test_a_disabled_gate_holds_nothing():
    gate = RoundGate(enabled=False, timeout_s=10.0)
    assert not gate.closed(1) and not gate.closed(10**6)
    assert gate.requested == 0 and gate.overdue(10**6) is None


def test_the_first_push_of_a_new_round_asks_once_and_opening_releases_in_arrival_order():
    gate = RoundGate(enabled=True, timeout_s=10.0)
    assert gate.closed(1)
    assert gate.hold(1, "w0 key 0", 0.0) is True         # new round: ask the scheduler
    assert gate.hold(1, "w1 key 0", 0.1) is False        # already asked
    assert gate.hold(2, "w0 key 0 r2", 0.2) is True
    assert gate.hold(1, "w1 key 1", 0.3) is False
    assert gate.requested == 2 and gate.held == 4
    assert gate.open(1, 1.0) == ["w0 key 0", "w1 key 0", "w1 key 1"]
    assert gate.opened == 1 and not gate.closed(1) and gate.closed(2)
    assert gate.held == 1
    assert gate.open(0, 1.5) == [] and gate.opened == 1   # an older round opens nothing
    assert gate.open(3, 2.0) == ["w0 key 0 r2"]           # a later round opens all before
    assert gate.held == 0 and not gate.closed(3) and gate.closed(4)


def test_rounds_are_released_together_in_arrival_order():
    gate = RoundGate(enabled=True, timeout_s=10.0)
    gate.hold(2, "a", 0.0)
    gate.hold(1, "b", 0.0)
    gate.hold(3, "c", 0.0)
    assert gate.open(2, 1.0) == ["a", "b"]
    assert gate.requested == 3


def test_held_pushes_past_timeout_name_the_round():
    gate = RoundGate(enabled=True, timeout_s=10.0)
    gate.hold(1, "a", 100.0)
    gate.hold(1, "b", 105.0)                 # the wait counts from the first held push
    assert gate.overdue(110.0) is None       # exactly timeout_s: not yet
    assert gate.overdue(110.5) == ("round 1 not opened by the scheduler within "
                                   "timeout_s=10s; its 2 pushes cannot start")


def test_opening_a_round_restarts_the_wait_of_those_still_held():
    gate = RoundGate(enabled=True, timeout_s=10.0)
    gate.hold(1, "a", 0.0)
    gate.hold(2, "b", 0.0)
    gate.open(1, 8.0)
    assert gate.overdue(15.0) is None
    assert "round 2 not opened" in gate.overdue(18.5) and "its 1 pushes" in gate.overdue(18.5)
    gate.open(2, 19.0)
    assert gate.overdue(1000.0) is None      # nothing held: never overdue


def test_the_next_round_is_asked_for_a_round_ahead_so_no_push_waits():
    """Round 1 waits once (nothing is open at start); from then on the first push of the
    latest open round asks for the next, which opens before its first push: no more
    waits. Only the latest open round asks, once."""
    gate = RoundGate(enabled=True, timeout_s=10.0)
    assert gate.hold(1, "r1", 0.0) and gate.open(1, 0.2) == ["r1"]
    assert (gate.waits, round(gate.waited_s, 6)) == (1, 0.2)
    assert gate.passed(1) is True and gate.requested == 2      # ask for round 2 now
    assert gate.passed(1) is False                             # once
    gate.open(2, 0.5)                                          # round 2 opens early
    assert not gate.closed(2) and gate.passed(2) and gate.requested == 3
    assert gate.passed(1) is False                             # an older round: nothing
    assert gate.waits == 1
    disabled = RoundGate(enabled=False, timeout_s=10.0)
    assert disabled.passed(0) is False and disabled.requested == 0
