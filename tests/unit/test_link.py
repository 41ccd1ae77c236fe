"""A worker's link to its DC server (geoserver/worker/link.py): which requests wait in the
outbox, and a send that fails there fails its requests without ending the I/O thread."""
import time

import numpy as np
import pytest

from netstorm.geoserver.core.nodes import NodeInfo
from netstorm.geoserver.core.wire import Kind, Message
from netstorm.geoserver.worker.keys import KeyInfo
from netstorm.geoserver.worker.link import ServerLink
from netstorm.geoserver.worker.pending import Pending
from netstorm.geoserver.worker.requests import Requests


def _link(po, van, fuse_bytes=0):
    """The link of worker rank 0 to the server of eu, sending with ``po``, waking ``van``."""
    return ServerLink(po, van, NodeInfo(1, "server", "eu", "tcp://127.0.0.1:2"),
                      Requests(0, 30.0, False), fuse_bytes, 0.0)


def test_requests_the_outbox_could_not_send_fail_naming_the_cause_and_the_rest_goes_on():
    """Small requests wait in the outbox (batch.py) and go from the I/O thread; a send
    that fails there fails those requests with the reason instead of ending the thread."""
    class Broken:
        def send(self, node, msg):
            raise OSError("socket closed")

    class Wake:
        woken = 0

        def wake(self):
            self.woken += 1

    link = _link(Broken(), Wake())
    waiting = {r: Pending(f"value of key {r}") for r in (7, 8)}
    ended = []
    for request, pending in waiting.items():
        link.requests.pending[request] = pending
        pending.then(lambda p=pending: ended.append(p.error), time.monotonic() + 60)
        link.outbox.add(Message(Kind.PULL, key=request, request=request), time.monotonic())
    link.send_due(time.monotonic())             # as the I/O thread does
    assert link.van.woken == 1 and ended == [] and link.requests.pending == {}
    link.end_unsent()                           # the I/O loop, outside the lock
    assert sorted(ended) == [f"worker rank 0: could not send value of key {r}: "
                             f"OSError('socket closed')" for r in (7, 8)]


@pytest.mark.parametrize("fuse_bytes,key_bytes,sent_at_once", [
    (0, 16, True),              # fusion off: every request goes at once
    (64, 256, True),            # a key as large as fuse_bytes or more: at once
    (64, 16, False),            # a small key: it waits in the outbox
])
def test_which_requests_wait_in_the_outbox(fuse_bytes, key_bytes, sent_at_once):
    class Sent:
        def __init__(self):
            self.messages, self.woken = [], 0

        def send(self, node, msg):
            self.messages.append(msg)

        def wake(self):
            self.woken += 1

    sent = Sent()
    link = _link(sent, sent, fuse_bytes)
    keys = {5: KeyInfo(5, (key_bytes // 4,), np.dtype(np.float32))}
    push = Message(Kind.PUSH, key=5, seq=1, dtype=np.float32,
                   frames=[np.zeros(key_bytes // 4, np.float32)])
    link.post(push, keys)
    assert (link.po.messages == [push]) == sent_at_once
    assert link.po.woken == (0 if sent_at_once else 1)
    init = Message(Kind.INIT, key=6, meta={"shape": [1], "dtype": "<f4"})
    link.post(init, keys)               # anything else goes at once, after what waited
    assert link.po.messages == [push, init] and not link.outbox.messages
