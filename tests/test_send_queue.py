"""geoserver.send_queue: the most urgent message goes first once the peer can take more."""
from geoserver import wire
from geoserver.send_queue import SendQueue


class FakeVan:
    """A Van whose peers take ``room[peer]`` messages and then report a full queue."""

    def __init__(self):
        self.room = {}
        self.sent = []

    def try_send(self, peer, msg) -> bool:
        if self.room.get(peer, 0) <= 0:
            return False
        self.room[peer] -= 1
        self.sent.append((peer, msg.key))
        return True


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
