"""netstorm.kvstore.engine_async: Python functions as asynchronous MXNet engine operations,
completed from any thread, and failing the way MXNet operators fail."""

import threading
import time
import mxnet as mx
import numpy as np
import pytest
from netstorm.kvstore import engine_async
from netstorm.kvstore.engine_async import memory_view as _view


@pytest.fixture(scope="module")
def engine():
    checked = engine_async.AsyncEngine.checked()
    assert checked is not None, "the asynchronous engine calls failed their check"
    assert checked.errors_propagate          # the threaded engine, MXNet's default
    return checked


def _later(seconds, function):
    threading.Timer(seconds, function).start()


def test_an_operation_completed_from_another_thread_holds_its_readers_until_then(engine):
    out, token = mx.nd.zeros((4,)), mx.nd.zeros((1,))
    mx.nd.waitall()
    started = []

    def start(done):
        started.append(threading.current_thread() is threading.main_thread())
        target = _view(out)

        def finish():
            target[:] = 7
            done.done()
        _later(0.05, finish)
    t0 = time.monotonic()
    engine.push(start, [], [out, token])
    assert started == [True]                 # inputs ready: run in the caller's thread
    reader = out + 1                         # queued behind the operation
    assert reader.asnumpy().tolist() == [8.0] * 4 and time.monotonic() - t0 >= 0.04


def test_an_operation_waits_for_its_inputs_and_keeps_issue_order_per_output(engine):
    ones, out = mx.nd.ones((3,)), mx.nd.zeros((3,))
    out_view, seen = _view(out), []
    data = ones * 5                          # computed by the engine: the input is not ready

    def copy(done):
        seen.append(_view(data).tolist())
        out_view[:] = _view(data)
        done.done()
    engine.push(copy, [data], [out])

    def double(done):
        _view(out)[:] *= 2
        done.done()
    engine.push(double, [], [out])
    assert out.asnumpy().tolist() == [10.0] * 3 and seen == [[5.0] * 3]


def test_a_failed_operation_raises_its_reason_in_every_reader_and_waitall(engine):
    out = mx.nd.zeros((2,))
    engine.push(lambda done: _later(0.02, lambda: done.fail(
        "KVStoreError: worker rank 0: worker rank 1 (dc1/0, node 4) finished")), [], [out])
    with pytest.raises(mx.base.MXNetError, match=r"rank 1 \(dc1/0, node 4\) finished"):
        out.asnumpy()
    out2 = mx.nd.zeros((2,))
    engine.push(lambda done: done.fail("second failure"), [], [out2])
    with pytest.raises(mx.base.MXNetError, match="second failure"):
        mx.nd.waitall()
    mx.nd.waitall()                          # raised once, then gone


def test_an_exception_in_the_function_fails_the_operation_with_its_text(engine):
    out = mx.nd.zeros((2,))

    def start(done):
        raise ValueError("no such key")
    engine.push(start, [], [out])
    with pytest.raises(mx.base.MXNetError, match="no such key"):
        out.wait_to_read()


def test_completing_twice_is_harmless(engine):
    out = mx.nd.zeros((1,))

    def start(done):
        done.done()
        done.fail("too late")
        done.done()
    engine.push(start, [], [out])
    assert out.asnumpy().tolist() == [0.0]


def test_many_operations_in_flight_complete_in_any_order(engine):
    outs = [mx.nd.zeros((1,)) for _ in range(64)]
    rng = np.random.default_rng(0)
    for i, out in enumerate(outs):
        def start(done, i=i, out=out):
            view = _view(out)

            def finish():
                view[0] = i
                done.done()
            _later(float(rng.uniform(0, 0.05)), finish)
        engine.push(start, [], [out], priority=-i)
    assert [o.asscalar() for o in outs] == list(range(64))


NAIVE = """
import threading
import mxnet as mx
from netstorm.kvstore.engine_async import AsyncEngine
engine = AsyncEngine.checked()
assert engine is not None and not engine.errors_propagate
out = mx.nd.zeros((1,))
try:
    engine.push(lambda done: threading.Timer(0.02, done.fail, ["lost the server"]).start(),
                [], [out])
except mx.base.MXNetError as exc:
    assert "lost the server" in str(exc)
    print("raised at the push")
engine.push(lambda done: threading.Timer(0.02, done.done).start(), [], [out])
print("completed")
"""


def test_no_engine_where_the_cxx_runtime_is_not_the_expected_one(monkeypatch):
    monkeypatch.setattr(engine_async.platform, "machine", lambda: "aarch64")
    assert engine_async.AsyncEngine.checked() is None
