"""Closed connections (geoserver/core/connection_watch.py), fed ZeroMQ's monitor events by
hand: a connection that was up and closed is reported (and wakes the loop), one that never
came up is not, one that comes back clears it, and a replaced or dropped socket's late
events are ignored. The grace grows with the round trip."""
import zmq

from netstorm.geoserver.core.connection_watch import (CLOSED_GRACE_S, ConnectionWatch,
                                                      closed_grace, closed_verdict)

UP, DOWN = zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_DISCONNECTED


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _watch(**kw):
    clock, woken = Clock(), []
    return ConnectionWatch(wake=lambda: woken.append(clock.t), clock=clock, **kw), clock, woken


def test_a_connection_that_was_up_and_closed_is_reported_and_wakes_the_loop():
    watch, clock, woken = _watch()
    events, handle = watch.handler(7)
    assert events & UP and events & DOWN
    handle(DOWN, 0, b"")                # a failed attempt before any handshake: not closed
    assert watch.closed(clock.t) == {} and not woken
    handle(UP, 0, b"")
    assert watch.closed_for(7, clock.t) == 0.0
    handle(DOWN, 0, b"")
    clock.t += 0.3
    assert list(watch.closed(clock.t)) == [7]
    assert abs(watch.closed_for(7, clock.t) - 0.3) < 1e-9
    assert woken == [100.0]
    handle(UP, 0, b"")                  # ZeroMQ reconnected: a live peer
    assert watch.closed(clock.t) == {}


def test_a_replaced_or_forgotten_socket_s_late_events_are_ignored():
    watch, clock, _ = _watch()
    _, old = watch.handler(7)
    old(UP, 0, b"")
    _, new = watch.handler(7)           # a new process at node 7's id, a new socket
    assert old(DOWN, 0, b"") is True    # stale: its watch ends
    assert watch.closed(clock.t) == {}
    new(UP, 0, b"")
    watch.forget(7)
    assert new(DOWN, 0, b"") is True and watch.closed(clock.t) == {}


def test_only_wanted_peers_are_watched():
    watch, _, _ = _watch(wants=lambda peer: isinstance(peer, int))
    assert watch.handler("tcp://127.0.0.1:9") is None and watch.handler(3) is not None


def test_the_grace_is_a_few_round_trips_and_waits_for_messages_read_first():
    assert closed_grace(0.0) == CLOSED_GRACE_S
    assert closed_grace(0.5) == 1.0
    assert not closed_verdict(CLOSED_GRACE_S / 2, 0.0, waiting=False)
    assert closed_verdict(CLOSED_GRACE_S, 0.0, waiting=False)
    assert not closed_verdict(CLOSED_GRACE_S, 0.0, waiting=True)     # its BYE, perhaps
    assert not closed_verdict(0.5, 0.4, waiting=False)                # a long link
