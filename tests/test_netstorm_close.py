"""NetStorm's lifecycle without a cluster: the worker client is a stand-in, so no sockets."""
import atexit
import sys

import pytest

from netstorm.geoserver.worker_client import WorkerSettings
from netstorm.kvstore import netstorm as plugin


class StandInClient:
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
