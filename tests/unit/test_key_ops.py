"""netstorm.kvstore.key_ops: a key's pushpull, push and pull as engine operations: values
arrive asynchronously, per-key order holds, failures reach the readers with their reason,
and the store falls back to custom operators where the engine calls are unusable."""
import threading

import mxnet as mx
import numpy as np
import pytest

from netstorm.geoserver.worker.pending import Pending
from netstorm.geoserver.worker.client import KVStoreError
from netstorm.kvstore import key_ops
from netstorm.kvstore.engine_async import AsyncEngine


class LaggingClient:
    """A worker client stand-in answering each request after ``delay_s`` from another
    thread: a push's value is the sum of everything pushed to the key (as if every worker
    pushed the same), a pull's the current sum; ``fail`` keys are refused."""

    def __init__(self, delay_s=0.01, fail=()):
        self.delay_s, self.fail = delay_s, set(fail)
        self.sums, self.calls, self.errors = {}, [], []

    def _answer(self, key):
        pending = Pending(f"value of key {key}")
        value = self.sums.get(key)
        snapshot = None if value is None else value.copy()
        if key in self.fail:
            error = f"worker rank 0: the server refused key {key}"
            threading.Timer(self.delay_s, pending.end, kwargs={"error": error}).start()
        else:
            threading.Timer(self.delay_s, pending.end, kwargs={"reply": snapshot}).start()
        return pending

    def start_push(self, key, grad, want_value, borrowed=False):
        self.calls.append(("push", key, want_value, borrowed))
        self.sums[key] = self.sums.get(key, 0) + np.array(grad)
        return self._answer(key) if want_value else None

    def start_pull(self, key):
        self.calls.append(("pull", key))
        return self._answer(key)

    def when_answered(self, handle, function):
        handle.then(function, deadline=1e9)

    def finish_into(self, key, handle, target):
        handle.wait(5)
        if handle.reply is None:
            raise KVStoreError(handle.error)
        target[:] = handle.reply

    def note_error(self, exc):
        self.errors.append(str(exc))


@pytest.fixture
def ops():
    engine = AsyncEngine.checked()
    assert engine is not None
    client = LaggingClient(fail={9})
    return key_ops.AsyncKeyOps(client, engine, fallback=None), client


def test_pushpull_writes_the_round_value_into_out_when_it_comes(ops):
    ops, client = ops
    token, grad, out = mx.nd.zeros((1,)), mx.nd.full((5,), 2.0), mx.nd.zeros((5,))
    for rnd in range(1, 4):
        ops.pushpull(0, grad, out, token, priority=0)
        assert (out + 0).asnumpy().tolist() == [2.0 * rnd] * 5
    assert client.calls == [("push", 0, True, False)] * 3


def test_pushpull_in_place_and_a_key_keeps_the_order_of_its_operations(ops):
    ops, client = ops
    token, grad = mx.nd.zeros((1,)), mx.nd.ones((3,))
    ops.pushpull(1, grad, grad, token)       # grad becomes 1
    ops.pushpull(1, grad, grad, token)       # pushes that 1: sum 2
    pulled = mx.nd.zeros((3,))
    ops.pull(1, pulled, token)
    assert pulled.asnumpy().tolist() == [2.0] * 3 and grad.asnumpy().tolist() == [2.0] * 3
    assert [c[0] for c in client.calls] == ["push", "push", "pull"]


def test_a_plain_push_copies_and_completes_at_once(ops):
    ops, client = ops
    token, grad = mx.nd.zeros((1,)), mx.nd.full((4,), 3.0)
    ops.push(2, grad, token)
    grad[:] = 100                            # after the push: the push saw 3
    out = mx.nd.zeros((4,))
    ops.pull(2, out, token)
    assert out.asnumpy().tolist() == [3.0] * 4
    assert client.calls[0] == ("push", 2, False, True)


def test_a_failed_request_fails_its_readers_with_the_reason_and_is_noted(ops):
    ops, client = ops
    token, grad, out = mx.nd.zeros((1,)), mx.nd.ones((2,)), mx.nd.zeros((2,))
    ops.pushpull(9, grad, out, token)
    with pytest.raises(mx.base.MXNetError, match="the server refused key 9"):
        out.asnumpy()
    assert client.errors == ["worker rank 0: the server refused key 9"]
    ok_out = mx.nd.zeros((2,))
    ops.pushpull(3, grad, ok_out, mx.nd.zeros((1,)))    # other keys go on
    assert ok_out.asnumpy().tolist() == [1.0, 1.0]


def test_an_error_raised_when_the_request_starts_fails_the_operation(ops):
    ops, client = ops

    def refuse(*args, **kwargs):
        raise KVStoreError("worker rank 0: the run was aborted: dc1 is gone")
    client.start_push = refuse
    out = mx.nd.zeros((2,))
    ops.pushpull(4, mx.nd.ones((2,)), out, mx.nd.zeros((1,)))
    with pytest.raises(mx.base.MXNetError, match="dc1 is gone"):
        out.wait_to_read()
    assert client.errors == ["worker rank 0: the run was aborted: dc1 is gone"]


def test_an_output_that_is_a_view_of_the_input_gets_the_value(ops):
    ops, client = ops
    base = mx.nd.ones((2, 3))
    ops.pushpull(5, base, base.reshape((6,)), mx.nd.zeros((1,)))
    ops.pushpull(5, base, base.reshape((6,)), mx.nd.zeros((1,)))    # pushes the 1s: sum 2
    assert base.asnumpy().tolist() == [[2.0] * 3] * 2


def test_without_usable_engine_calls_the_store_uses_custom_operators(monkeypatch):
    monkeypatch.setattr(key_ops.AsyncEngine, "checked", classmethod(lambda cls: None))
    assert isinstance(key_ops.key_operations(LaggingClient(), "store-x"), key_ops.CustomKeyOps)


def test_a_weight_an_inference_pass_left_in_mkldnn_layout_is_written_through_mxnets_copy(ops):
    """Inference reorders convolution weights in place (MKL-DNN); the next training pass
    orders them back only after its own use, possibly after the store's operation: the value
    must still arrive in the weight, never deadlock, and an input in that layout is refused
    with the reason."""
    from mxnet import gluon

    from netstorm.kvstore.engine_async import memory_view
    ops, client = ops
    conv = gluon.nn.Conv2D(8, 3, in_channels=3)
    conv.initialize()
    weight = conv.weight.data()
    conv(mx.nd.ones((1, 3, 8, 8))).wait_to_read()
    mx.nd.waitall()
    assert memory_view(weight) is None          # MKL-DNN layout now
    grad = mx.nd.full(weight.shape, 0.5)
    ops.pushpull(6, grad, weight, mx.nd.zeros((1,)))
    assert weight.asnumpy().ravel().tolist() == [0.5] * weight.size
    conv(mx.nd.ones((1, 3, 8, 8))).wait_to_read()
    pulled = mx.nd.zeros(weight.shape)
    ops.pull(6, pulled, mx.nd.zeros((1,)))
    ops.pull(6, weight, mx.nd.zeros((1,)))
    assert pulled.asnumpy().ravel().tolist() == [0.5] * weight.size
    assert weight.asnumpy().ravel().tolist() == [0.5] * weight.size
    conv(mx.nd.ones((1, 3, 8, 8))).wait_to_read()
    mx.nd.waitall()
    ops.push(7, weight, mx.nd.zeros((1,)))
    with pytest.raises(mx.base.MXNetError, match="MKL-DNN's blocked layout"):
        mx.nd.waitall()
