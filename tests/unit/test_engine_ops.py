"""netstorm.kvstore.engine_ops: the key operators run through one static CachedOp per key,
built once, writing the output they are given, in the order they were issued."""
import gc

import mxnet as mx
import numpy as np

from netstorm.kvstore import engine_ops


class EchoClient:
    """A worker client stand-in: a push's value is its gradient times 10 (the round's
    "sum"), a pull's is the last value; every call is recorded."""

    def __init__(self):
        self.calls, self.last = [], {}

    def start_push(self, key, grad, want_value):
        self.calls.append(("push", key))
        self.last[key] = np.array(grad) * 10
        return key

    def start_pull(self, key):
        self.calls.append(("pull", key))
        return key

    def finish_into(self, key, handle, target):
        target[:] = self.last[key]


def _counting(monkeypatch):
    built = []
    original = engine_ops._PushPull

    class Counted(original):
        def __init__(self, *args):
            built.append(args[1])
            super().__init__(*args)
    monkeypatch.setattr(engine_ops, "_PushPull", Counted)
    return built


def test_an_operator_is_built_once_per_key_and_writes_the_given_output(monkeypatch):
    client = EchoClient()
    engine_ops.attach("store-a", client)
    built = _counting(monkeypatch)
    ops = engine_ops.KeyOperators("store-a")
    tokens = [mx.nd.zeros((1,)) for _ in range(2)]
    outs = [mx.nd.zeros((3,)) for _ in range(2)]
    for rnd in range(1, 6):
        for key in range(2):
            grad = mx.nd.full((3,), rnd + key)
            assert ops("netstorm_pushpull", key, grad, tokens[key], outs[key],
                       want_value="1") is outs[key]
        mx.nd.waitall()
        assert outs[0].asnumpy().tolist() == [10.0 * rnd] * 3
        assert outs[1].asnumpy().tolist() == [10.0 * (rnd + 1)] * 3
    assert sorted(built) == [0, 1]                  # not once per call
    assert client.calls.count(("push", 0)) == 5
    pulled = mx.nd.zeros((3,))
    ops("netstorm_pull", 1, pulled, tokens[1], pulled)
    assert pulled.asnumpy().tolist() == [60.0] * 3
    ops.release()
    assert not ops._ops


def test_a_call_leaves_almost_nothing_for_the_garbage_collector():
    client = EchoClient()       # the table holds clients weakly
    engine_ops.attach("store-b", client)
    ops = engine_ops.KeyOperators("store-b")
    token, grad, out = mx.nd.zeros((1,)), mx.nd.ones((4,)), mx.nd.zeros((4,))
    ops("netstorm_pushpull", 0, grad, token, out, want_value="1")      # built here
    mx.nd.waitall()
    gc.collect()
    gc.disable()
    try:
        for _ in range(50):
            ops("netstorm_pushpull", 0, grad, token, out, want_value="1")
        mx.nd.waitall()
        garbage = gc.collect()
    finally:
        gc.enable()
    assert garbage < 50 * 20     # mx.nd.Custom left ~145 objects in cycles per call
    ops.release()


def test_a_push_and_its_gradient_can_be_the_same_array():
    client = EchoClient()
    engine_ops.attach("store-c", client)
    ops = engine_ops.KeyOperators("store-c")
    grad, token = mx.nd.ones((2,)), mx.nd.zeros((1,))
    for _ in range(3):
        ops("netstorm_pushpull", 0, grad, token, grad, want_value="1")    # in place
    assert grad.asnumpy().tolist() == [1000.0, 1000.0]
    ops.release()
