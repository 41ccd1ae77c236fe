"""geoserver.send_queue: the most urgent message goes first once the peer can take more."""
from fakes import Clock, FakeVan
from netstorm.geoserver import wire
from netstorm.geoserver.send_queue import SendQueue


def chunk(key):
    return wire.Message(wire.Kind.CHUNK_UP, key=key)


def test_sends_at_once_while_the_peer_has_room():
    van = FakeVan()
    van.room["p"] = 5
    queue = SendQueue(van)
    queue.send("p", chunk(1), (0, 1, 0))
    assert van.sent == [("p", 1)] and queue.waiting() == 0 and queue.backlogged() == []


def test_backlog_leaves_in_priority_order_and_ties_keep_their_order():
    van = FakeVan()
    queue = SendQueue(van)
    for key, priority in [(10, (2, 0, 0)), (11, (1, 5, 0)), (12, (1, 5, 0)), (13, (1, 0, 3)),
                          (14, ())]:
        queue.send("p", chunk(key), priority)
    assert van.sent == [] and queue.waiting("p") == 5 and queue.backlogged() == ["p"]
    van.room["p"] = 2
    queue.flush("p")
    assert van.sent == [("p", 14), ("p", 13)]      # control first, then the oldest round
    van.room["p"] = 10
    queue.flush("p")
    assert [k for _, k in van.sent] == [14, 13, 11, 12, 10]
    assert queue.backlogged() == [] and queue.waiting() == 0


def test_peers_are_independent():
    van = FakeVan()
    van.room["fast"] = 10
    queue = SendQueue(van)
    queue.send("slow", chunk(1), (0,))
    queue.send("fast", chunk(2), (5,))
    assert van.sent == [("fast", 2)]
    assert queue.backlogged() == ["slow"] and queue.waiting("slow") == 1


def test_stalled_allows_time_for_the_last_message_and_take_returns_the_stuck_ones():
    import numpy as np
    van = FakeVan()
    clock = Clock()
    queue = SendQueue(van, clock=clock, keep_recent=2)
    van.room["p"] = 3
    big = wire.Message(wire.Kind.CHUNK_UP, key=9, dtype=np.float32,
                       frames=[np.zeros(1 << 18, np.float32)])            # 1 MiB
    for key in (1, 2):
        queue.send("p", chunk(key), (0, key, 0))
    queue.send("p", big, (0, 3, 0))
    queue.send("p", chunk(4), (0, 4, 0))                      # no room: waits, QUEUED
    assert queue.waiting("p") == 1

    def allowed(peer, nbytes):
        return 1.0 + nbytes / 1e6                             # 1 s + 1 s per MB
    clock.t = 1.5
    assert queue.stalled(allowed) == []                       # the 1 MiB may take 2 s
    clock.t = 2.2
    assert queue.stalled(allowed) == ["p"]
    handed, waiting = queue.take("p")
    assert [m.key for m in handed] == [2, 9] and [m.key for m in waiting] == [4]
    assert waiting[0].flags & wire.Flag.QUEUED and not handed[0].flags & wire.Flag.QUEUED
    assert queue.backlogged() == [] and queue.stalled(allowed) == []


def test_after_a_pause_the_next_message_to_a_waiting_peer_is_not_marked_queued():
    """A sender away from its sockets may have let the link idle: the receiver must not
    time that gap as the link's, so the first message after it goes unmarked."""
    van = FakeVan()
    queue = SendQueue(van)
    messages = [chunk(key) for key in (1, 2, 3, 4)]
    for msg in messages:
        queue.send("p", msg, (0, msg.key, 0))
    queue.send("idle", chunk(9), ())                   # nothing waits for "idle" afterwards
    van.room["p"] = 1
    queue.flush("p")
    assert messages[0].flags & wire.Flag.QUEUED        # no pause: back to back
    queue.paused()
    van.room["p"] = 0
    queue.flush("p")                                   # no room yet: the mark stays to do
    van.room["p"] = 2
    queue.flush("p")
    assert not messages[1].flags & wire.Flag.QUEUED    # the first after the pause
    assert messages[2].flags & wire.Flag.QUEUED        # then back to back again
    van.room["idle"] = 1
    queue.flush("idle")
    assert van.sent[-1] == ("idle", 9)
