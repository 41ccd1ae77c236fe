"""geoserver.send_queue: the most urgent message goes first once the peer can take more."""
from fakes import Clock, FakeVan
from netstorm.geoserver.core import wire
from netstorm.geoserver.server.wan.send_queue import SendQueue

import pytest


@pytest.fixture(autouse=True)
def _both_implementations(dataplane, monkeypatch):
    """Every test runs on SendQueue (the specification) and on the compiled data plane's
    counterpart, with the same assertions (``dataplane``: tests/unit/conftest.py)."""
    if dataplane == "native":
        from netstorm.geoserver.server.native_socket_free import socket_free_send_queue
        monkeypatch.setitem(globals(), "SendQueue", socket_free_send_queue)


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
    queue = SendQueue(van, clock=clock, retain_bytes=1 << 30)
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
    assert [m.key for m in handed] == [1, 2, 9] and [m.key for m in waiting] == [4]
    assert waiting[0].flags & wire.Flag.QUEUED and not handed[0].flags & wire.Flag.QUEUED
    assert queue.backlogged() == [] and queue.stalled(allowed) == []


def test_after_a_pause_the_next_message_to_a_waiting_peer_is_not_marked_queued():
    """A sender away from its sockets may have let the link idle: the receiver must not
    time that gap as the link's, so the first message after it goes unmarked."""
    van = FlagVan()
    queue = SendQueue(van)
    for key in (1, 2, 3, 4):
        queue.send("p", chunk(key), (0, key, 0))
    queue.send("idle", chunk(9), ())                   # nothing waits for "idle" afterwards
    van.room["p"] = 1
    queue.flush("p")
    assert van.marked[1]                               # no pause: back to back
    queue.paused()
    van.room["p"] = 0
    queue.flush("p")                                   # no room yet: the mark stays to do
    van.room["p"] = 2
    queue.flush("p")
    assert not van.marked[2]                           # the first after the pause
    assert van.marked[3]                               # then back to back again
    van.room["idle"] = 1
    queue.flush("idle")
    assert van.sent[-1] == ("idle", 9)


class FlagVan(FakeVan):
    """Records whether each message handed over (by key) carried the QUEUED mark."""

    def __init__(self):
        super().__init__()
        self.marked = {}

    def take(self, peer, msg) -> None:
        super().take(peer, msg)
        self.marked[msg.key] = bool(msg.flags & wire.Flag.QUEUED)


class BatchVan(FakeVan):
    """Records what each send carried: a key, or the keys of a BATCH."""

    def __init__(self):
        super().__init__()
        self.carried = []

    def take(self, peer, msg) -> None:
        super().take(peer, msg)
        from netstorm.geoserver.core import batch
        self.carried.append([m.key for m in batch.unpack(msg)] if msg.kind == wire.Kind.BATCH
                            else msg.key)


def sized(key, nbytes, kind=wire.Kind.CHUNK_UP, seq=1):
    import numpy as np
    data = np.zeros(nbytes // 4, np.float32)
    return wire.Message(kind, key=key, seq=seq, dtype=data.dtype, frames=[data])


def test_chunks_handed_over_are_kept_until_their_round_is_acknowledged():
    """A detour must resend everything that may be stuck with a stalled link, however
    much of a round is past the queue: each chunk message (relays too, no control
    message) is kept until the rounds before its own are acknowledged, within a byte
    budget per peer (the oldest go first beyond it)."""
    van = FakeVan()
    van.room["p"] = 100
    queue = SendQueue(van, retain_bytes=10 * 1024)
    for rnd in (1, 2, 3):
        for key in range(3):
            queue.send("p", sized(key, 1024, seq=rnd), (rnd, key, 0))
    queue.send("p", sized(7, 1024, kind=wire.Kind.RELAY, seq=3), (3, 7, 0))
    queue.send("p", wire.Message(wire.Kind.HEARTBEAT), ())
    assert queue.retained("p") == 10 and queue.retained() == 10
    assert queue.release_before(2) == 3 and queue.retained("p") == 7
    for key in range(4):                          # 4 KiB more: the budget drops the oldest
        queue.send("p", sized(key, 1024, seq=4), (4, key, 0))
    handed, waiting = queue.take("p")
    assert [(m.seq, m.key) for m in handed] == [(2, 1), (2, 2), (3, 0), (3, 1), (3, 2),
                                                (3, 7), (4, 0), (4, 1), (4, 2), (4, 3)]
    assert waiting == [] and queue.retained() == 0
    assert SendQueue(van).retained() == 0        # without a budget, nothing is kept


def test_small_waiting_chunks_leave_together_most_urgent_first_until_a_large_one(dataplane):
    if dataplane == "native":
        pytest.skip("the compiled queues never fuse: a chunk costs them microseconds")
    from netstorm.geoserver.server.wan.send_queue import FUSED_BYTES
    van = BatchVan()
    queue = SendQueue(van, fuse_bytes=1024, retain_bytes=1 << 20)
    for key, nbytes in [(5, 64), (1, 512), (2, 2048), (3, 16), (4, 16), (0, 1024 - 4)]:
        queue.send("p", sized(key, nbytes), (1, key, 0))
    van.room["p"] = 1
    queue.flush("p")
    assert van.carried == [[0, 1]]              # 2 is not small: the BATCH ends there
    van.room["p"] = 5
    queue.flush("p")
    assert van.carried == [[0, 1], 2, [3, 4, 5]] and queue.fused == 5
    handed, waiting = queue.take("p")
    assert [m.key for m in handed] == [0, 1, 2, 3, 4, 5] and waiting == []   # one by one
    many = SendQueue(van, fuse_bytes=FUSED_BYTES)
    for key in range(5):
        many.send("q", sized(key, FUSED_BYTES // 2 - 4), (1, key, 0))
    van.room["q"] = 9
    many.flush("q")
    assert van.carried[-3:] == [[0, 1], [2, 3], 4]     # at most FUSED_BYTES a BATCH


def test_a_refused_batch_leaves_everything_waiting_in_order(dataplane):
    if dataplane == "native":
        pytest.skip("the compiled queues never fuse: a chunk costs them microseconds")
    van = BatchVan()
    queue = SendQueue(van, fuse_bytes=1024)
    for key in (3, 1, 2):
        queue.send("p", sized(key, 16), (1, key, 0))
    queue.flush("p")                            # no room: nothing leaves
    assert van.carried == [] and queue.waiting("p") == 3
    van.room["p"] = 1
    queue.flush("p")
    assert van.carried == [[1, 2, 3]] and queue.waiting() == 0


def test_only_chunks_are_fused_and_not_without_fuse_bytes(dataplane):
    if dataplane == "native":
        pytest.skip("the compiled queues never fuse: a chunk costs them microseconds")
    van = BatchVan()
    queue = SendQueue(van, fuse_bytes=1024)
    queue.send("p", sized(1, 16, wire.Kind.UPDATE), (1, 1, 0))
    queue.send("p", sized(2, 16, wire.Kind.UPDATE), (1, 2, 0))
    plain = SendQueue(van)
    plain.send("q", sized(1, 16), (1, 1, 0))
    plain.send("q", sized(2, 16), (1, 2, 0))
    van.room.update(p=5, q=5)
    queue.flush("p")
    plain.flush("q")
    assert van.carried == [1, 2, 1, 2]


def test_a_part_of_a_chunk_is_not_fused(dataplane):
    if dataplane == "native":
        pytest.skip("the compiled queues never fuse: a chunk costs them microseconds")
    van = BatchVan()
    queue = SendQueue(van, fuse_bytes=1024)
    part = sized(1, 16)
    part.meta = {"part": [0, 8], "from": "eu"}
    for msg in (part, sized(2, 16), sized(3, 16)):
        queue.send("p", msg, (1, msg.key, 0))
    van.room["p"] = 5
    queue.flush("p")
    assert van.carried == [1, [2, 3]]


def test_messages_taken_back_and_not_chosen_keep_their_place_and_the_stall_clock():
    """take_waiting (a re-split, a replay) must not restart a stuck link's stall clock nor
    hand anything over: what it does not choose stays as it was."""
    van, clock = FakeVan(), Clock()
    queue = SendQueue(van, clock=clock)
    for key in (1, 2, 3):
        queue.send("p", chunk(key), (0, key, 0))
    clock.t = 5.0
    taken = queue.take_waiting("p", lambda msg: msg.key == 2)
    assert [m.key for m in taken] == [2] and queue.waiting("p") == 2 and van.sent == []
    assert queue.stalled(lambda peer, nbytes: 1.0) == ["p"]
    van.room["p"] = 5
    queue.flush("p")
    assert [k for _, k in van.sent] == [1, 3]
