"""netstorm.kvstore's handling of MXNet's distributed store names: without --as-dist-sync,
under the launcher, ``mx.kv.create('dist_*')`` is refused saying what to do, before MXNet's
native store (ps-lite) would abort the process; names already taken are left alone."""
import mxnet as mx
import pytest
from mxnet.kvstore.base import KVStoreBase

from netstorm.geoserver.worker.settings import KVStoreError
from netstorm.kvstore import DIST_ASYNC_NAMES, DIST_SYNC_NAMES, refuse_stock_dist


@pytest.fixture
def registry(monkeypatch):
    """MXNet's store registry, restored after the test."""
    copy = dict(KVStoreBase.kv_registry)
    monkeypatch.setattr(KVStoreBase, "kv_registry", copy)
    return copy


def test_stock_dist_names_are_refused_naming_the_flag_and_async_naming_sync_only(registry):
    refuse_stock_dist()
    for name in DIST_SYNC_NAMES:
        with pytest.raises(KVStoreError, match=f"asks for MXNet's '{name}' kvstore, which "
                                               f"needs MXNet's own parameter servers: add "
                                               f"--as-dist-sync to netstorm-launch"):
            mx.kv.create(name.upper())      # MXNet lowercases the name first
    for name in DIST_ASYNC_NAMES:
        with pytest.raises(KVStoreError, match=f"'{name}' kvstore, but netstorm runs "
                                               f"synchronous training only"):
            mx.kv.create(name)
    assert type(mx.kv.create("local")).__name__ == "KVStore"     # others as before


def test_a_name_already_registered_is_kept(registry):
    class Mine(KVStoreBase):
        pass
    registry["dist_sync"] = Mine
    refuse_stock_dist()
    assert registry["dist_sync"] is Mine and "dist_async" in registry
