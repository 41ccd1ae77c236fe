"""netstorm.kvstore.netstorm: the 'netstorm' kvstore against dist_sync semantics, in
multi-process clusters on loopback; and NetStorm's lifecycle without a cluster (a stand-in
worker client, so no sockets): the excepthook it installs is put back."""

import atexit
import sys
import mxnet as mx
import numpy as np
import pytest
from netstorm.geoserver.config.sync import SyncConfig
from netstorm.geoserver.worker.client import KVStoreError, WorkerSettings
from netstorm.kvstore import netstorm as plugin


class StandInClient:
    sync = SyncConfig()

    def __init__(self, settings):
        self.closed = []

    def close(self, clean=True, reason=""):
        self.closed.append((clean, reason))


@pytest.fixture
def store(monkeypatch):
    """A NetStorm whose excepthook replaced ``original``: ``(store, original, calls)``."""
    calls = []

    def original(*exc_info):
        calls.append(exc_info)
    monkeypatch.setattr(sys, "excepthook", original)
    monkeypatch.setattr(plugin, "WorkerClient", StandInClient)
    monkeypatch.setattr(atexit, "register", lambda func: None)   # nothing left for exit
    kv = plugin.NetStorm(WorkerSettings("tcp://127.0.0.1:1", "dc0"))
    assert sys.excepthook == kv._excepthook
    return kv, original, calls


def test_esync_refuses_a_barrier_once_training_started(store, monkeypatch):
    """esync's workers are at different rounds once they stepped: a barrier would wait for
    rounds that never come, so it is refused with the reason (before any step it works)."""
    from netstorm.kvstore.local_steps import LocalSteps
    kv, _, _ = store
    monkeypatch.setattr(StandInClient, "sync", SyncConfig(mode="esync"), raising=False)
    barriers = []
    kv._client.barrier = lambda: barriers.append(1)
    kv._local = LocalSteps(SyncConfig(mode="esync"), kv._client, None)
    kv._local.start(0, mx.nd.zeros(2))
    kv.barrier()
    assert barriers == [1]
    kv._local.keys[0].rounds = 1
    with pytest.raises(KVStoreError, match="under sync mode 'esync' workers run different"):
        kv.barrier()
    assert barriers == [1]


def test_close_puts_back_the_excepthook_it_replaced(store):
    kv, original, _ = store
    kv.close()
    assert sys.excepthook is original
    assert kv._client.closed == [(True, "")]


def test_close_leaves_a_hook_installed_after_it_alone(store):
    kv, _, _ = store

    def later(*exc_info):
        pass
    sys.excepthook = later
    kv.close()
    assert sys.excepthook is later


def test_an_uncaught_exception_reports_the_failure_and_puts_the_hook_back(store):
    kv, original, calls = store
    error = ValueError("bad batch")
    sys.excepthook(ValueError, error, None)
    assert calls == [(ValueError, error, None)]          # the previous hook still runs
    assert kv._client.closed == [(False, "ValueError: bad batch")]
    assert sys.excepthook is original


class Recorder:
    """Stands in for the store's key operations: each call goes to ``record(method, ...)``."""

    def __init__(self, record):
        self.pushpull, self.push, self.pull = (
            lambda *args, method=m: record(method, *args) for m in ("pushpull", "push", "pull"))


def test_pushpull_checks_each_new_array_and_skips_only_the_arrays_checked_last(store):
    """A Trainer passes the same arrays every step: their checks run once; another array
    (a wrong shape, a row_sparse output) is checked, and refused, every time."""
    from netstorm.geoserver.worker.client import KeyInfo
    kv, _, _ = store
    kv._client.keys = {0: KeyInfo(0, (3,), np.dtype(np.float32))}
    ran = []
    kv._ops = Recorder(lambda method, kid, data, *rest: ran.append(data))
    grad, other = mx.nd.ones(3), mx.nd.ones(3)
    checks = []
    real = kv._pushpull_checks
    kv._pushpull_checks = lambda *a: checks.append(a[0]) or real(*a)
    for _ in range(3):
        kv.pushpull(0, grad, out=grad)
    kv.pushpull(0, other, out=grad)
    assert len(checks) == 2 and ran == [grad, grad, grad, other]
    with pytest.raises(ValueError, match=r"key 0 is \(3,\) float32; got an array of \(4,\)"):
        kv.pushpull(0, mx.nd.ones(4), out=grad)
    sparse_out = mx.nd.zeros(3).tostype("row_sparse")
    for _ in range(2):
        with pytest.raises(mx.base.MXNetError, match="row_sparse output takes only"):
            kv.pushpull(0, grad, out=sparse_out)
    rows = mx.nd.ones(3).tostype("row_sparse")      # a row_sparse gradient goes dense
    kv.pushpull(0, rows, out=grad)
    kv.pushpull(0, rows, out=grad)
    assert all(a.stype == "default" for a in ran[4:]) and len(ran) == 6


def test_push_and_pull_check_new_arrays_and_keep_each_way_of_calling_apart(store):
    """The same checks as pushpull's skip only arrays that passed them for the same call:
    a pull that refuses row_sparse outputs is checked apart from one that skips them."""
    from netstorm.geoserver.worker.client import KeyInfo
    kv, _, _ = store
    kv._client.keys = {0: KeyInfo(0, (3,), np.dtype(np.float32))}
    ran = []
    kv._ops = Recorder(lambda method, kid, array, *rest: ran.append((method, array)))
    grad, weight = mx.nd.ones(3), mx.nd.zeros(3)
    for _ in range(2):
        kv.push(0, grad)
        kv.pull(0, out=weight)
    assert ran == [("push", grad), ("pull", weight)] * 2
    with pytest.raises(ValueError, match=r"key 0 is \(3,\) float32; got an array of \(2,\)"):
        kv.push(0, mx.nd.ones(2))
    sparse_out = mx.nd.zeros(3).tostype("row_sparse")
    kv.pull(0, out=sparse_out)                      # skipped, as dist_sync does
    assert len(ran) == 4
    with pytest.raises(mx.base.MXNetError, match="row_sparse output takes only"):
        kv.pull(0, out=sparse_out, ignore_sparse=False)
    halves = mx.nd.zeros(3, dtype="float16")        # another dtype: a float32 value first
    kv.pull(0, out=halves)
    assert ran[-1][1] is not halves and ran[-1][1].dtype == np.float32
