"""netstorm.geoserver.server.replies: small VALUEs to a worker wait and go together in one
BATCH, in the order they were made; anything else sends what waits first; esync stamps the
worker's local steps on a VALUE."""

import numpy as np

from netstorm.geoserver.core import batch, kinds, wire
from netstorm.geoserver.core.wire import Kind, Message
from netstorm.geoserver.server.replies import Replies


class Po:
    def __init__(self):
        self.sent = []

    def send(self, node, msg):
        self.sent.append((node, msg))


def value(request, size=4):
    return Message(Kind.VALUE, key=request, request=request, dtype=np.float32,
                   frames=[np.zeros(size, np.float32)])


def test_small_values_wait_and_go_in_one_batch_per_worker():
    po, stats = Po(), {"fused": 0}
    replies = Replies(po, 1024, None, stats)
    for request in (1, 2):
        replies.send(7, value(request))
    replies.send(8, value(3))
    assert po.sent == []
    replies.flush()
    (to7, batch), (to8, single) = po.sent
    assert (to7, batch.kind, to8, single.request) == (7, Kind.BATCH, 8, 3)
    assert stats["fused"] == 2


def test_a_large_value_or_another_reply_goes_after_what_waits_for_that_worker():
    po = Po()
    replies = Replies(po, 1024, None, {"fused": 0})
    replies.send(7, value(1))
    replies.send(7, value(2, size=1024))       # 4 KiB: not fused
    replies.send(7, Message(Kind.INIT_DONE, request=3))
    assert [m.request for _, m in po.sent] == [1, 2, 3]


def test_without_fusing_every_reply_goes_at_once():
    po = Po()
    Replies(po, 0, None, {"fused": 0}).send(7, value(1))
    assert len(po.sent) == 1


def test_under_esync_a_value_carries_the_workers_local_steps():
    class Balancer:
        def steps(self, worker, rnd):
            return 3

        def on_reply(self, worker, rnd, now):
            self.replied = (worker, rnd)

    po, balancer = Po(), Balancer()
    msg = value(1)
    msg.seq = 5
    Replies(po, 0, balancer, {"fused": 0}).send(7, msg)
    assert po.sent[0][1].meta == {"steps": 3} and balancer.replied == (7, 5)


def test_a_reply_to_any_request_id_a_header_carries_still_goes_fused():
    """The fuzz test's lost pull (seed 11, python data path): a forged PULL claiming the
    worker, with request id 2**64 - 1 (a header's largest), was answered in the same drain
    as the worker's own pull; the two VALUEs went fused, and the worker refused the whole
    BATCH since its rows took request ids up to 2**63 - 1 only: the real VALUE was lost."""
    po = Po()
    replies = Replies(po, 1024, None, {"fused": 0})
    for request in ((1 << 64) - 1, 5):         # the forged pull's answer, the worker's own
        replies.send(7, Message(Kind.VALUE, key=0, seq=3, request=request,
                                dtype=np.float32, frames=[np.zeros(4, np.float32)]))
    replies.flush()
    (_, sent), = po.sent
    received = kinds.validate(wire.decode([bytes(f) for f in wire.encode(sent)]))
    assert [m.request for m in batch.unpack(received)] == [(1 << 64) - 1, 5]
