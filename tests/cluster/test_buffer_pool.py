"""buffer_pool: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_buffer_pool.py."""

import time
import numpy as np
import zmq
from netstorm.geoserver.server.buffer_pool import BufferPool


def test_an_array_zeromq_still_sends_is_not_handed_out():
    """pyzmq keeps a zero-copy frame's object until ZeroMQ released its bytes."""
    pool = BufferPool(per_shape=1)
    ctx = zmq.Context()
    try:
        push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
        push.setsockopt(zmq.SNDHWM, 1)
        pull.bind("inproc://pool-test")
        push.connect("inproc://pool-test")
        a = pool.take(1 << 20, np.uint8)
        a[:] = 7
        tracker = push.send(a, copy=False, track=True)
        del a
        assert pool.take(1 << 20, np.uint8) is not None and pool.reused == 0
        got = pull.recv(copy=False)
        assert bytes(got.buffer[:3]) == b"\x07\x07\x07"
        del got
        tracker.wait(5)
        for _ in range(100):        # the collector thread drops its reference soon after
            pool.take(1 << 20, np.uint8)
            if pool.reused:
                break
            time.sleep(0.01)
        assert pool.reused == 1
        push.close(0)
        pull.close(0)
    finally:
        ctx.term()
