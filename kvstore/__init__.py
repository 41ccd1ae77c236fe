"""The ``'netstorm'`` kvstore for MXNet 1.9 (``netstorm.kvstore``).

Importing it registers the store (``import netstorm`` does so once MXNet is imported):
``mx.kv.create('netstorm')``, ``gluon.Trainer(..., kvstore='netstorm')`` and
``Module.fit(kvstore='netstorm')`` then use it.

MXNet's ``_create_kvstore`` skips any kvstore *string* without ``'dist'`` in it when a worker
has a single device, which would make ``kvstore='netstorm'`` silently train alone. Importing
this package therefore also routes the string ``'netstorm'`` through ``mx.kv.create`` in the
three places that call ``_create_kvstore`` (``mxnet.model``, ``gluon.trainer``,
``module.module``); every other kvstore string behaves as before.

:func:`alias_dist_sync` (``netstorm.as_dist_sync()``, ``launch.py --as-dist-sync``) also
registers the store under MXNet's synchronous distributed names, so that scripts written
for stock MXNet run unedited, and refuses the asynchronous ones with a clear error. Without
it, under the launcher, :func:`refuse_stock_dist` refuses MXNet's ``dist_*`` names saying to
add ``--as-dist-sync``: MXNet's own store would abort the process in ps-lite's C++, which
finds none of its ``DMLC_*`` variables, with no reason the launcher could show.
"""
from __future__ import annotations

import inspect

import mxnet.gluon.trainer
import mxnet.model
import mxnet.profiler
import mxnet.module.module

from mxnet.kvstore.base import KVStoreBase

from netstorm.geoserver.worker.client import KVStoreError

from .netstorm import NetStorm

__all__ = ["NetStorm", "alias_dist_sync", "refuse_stock_dist"]

_NAME = NetStorm.__name__.lower()
DIST_SYNC_NAMES = ("dist_sync", "dist_device_sync", "dist_sync_device", "dist")
DIST_ASYNC_NAMES = ("dist_async", "dist_device_async", "dist_async_device")


class DistAsyncRefused(KVStoreBase):
    """What ``dist_async`` creates under ``--as-dist-sync``: a clear error, never netstorm's
    synchronous store in its place (asynchronous training converges differently)."""

    def __init__(self):
        raise KVStoreError("this script asks for MXNet's dist_async, but netstorm (started "
                           "with --as-dist-sync) runs synchronous training only: use "
                           "dist_sync, or run the script on stock MXNet")


class StockDistRefused(KVStoreBase):
    """What MXNet's ``dist_*`` names create in a worker of netstorm's launcher started
    without ``--as-dist-sync``: a clear error saying what to do (each name gets its own
    subclass, :func:`refuse_stock_dist`, so the error names the store asked for)."""

    asked = "dist_sync"

    def __init__(self):
        if self.asked in DIST_ASYNC_NAMES:
            raise KVStoreError(
                f"this script asks for MXNet's {self.asked!r} kvstore, but netstorm runs "
                f"synchronous training only: use dist_sync (and netstorm-launch "
                f"--as-dist-sync), or run the script on stock MXNet")
        raise KVStoreError(
            f"this script asks for MXNet's {self.asked!r} kvstore, which needs MXNet's own "
            f"parameter servers: add --as-dist-sync to netstorm-launch, so that "
            f"{self.asked!r} creates netstorm's store (or name the store 'netstorm' in the "
            f"script)")


def refuse_stock_dist() -> None:
    """Register :class:`StockDistRefused` under MXNet's distributed names not registered
    yet (``KVStoreBase.kv_registry``, consulted before MXNet's native stores); the launcher's
    boot calls it in workers started without ``--as-dist-sync``. MXNet's native store would
    take any name containing ``dist``; these are the names MXNet documents."""
    for name in DIST_SYNC_NAMES + DIST_ASYNC_NAMES:
        if name not in KVStoreBase.kv_registry:
            KVStoreBase.kv_registry[name] = type(f"StockDistRefused_{name}",
                                                 (StockDistRefused,), {"asked": name})


SERVER_PROFILING = ("set_config", "set_state", "dump", "pause", "resume")


def _refuse_server_profiling() -> None:
    """MXNet's ``mx.profiler`` calls with ``profile_process='server'`` reach the parameter
    servers through the last native kvstore's handle; netstorm's servers are not MXNet
    processes. Once a netstorm store exists in this process (the handle, if any, is some
    other store's), or when there is no handle (MXNet would fail in C++: "null handle"),
    they are refused with a clear error; otherwise (stock MXNet) they behave as before."""
    for name in SERVER_PROFILING:
        original = getattr(mxnet.profiler, name)
        if getattr(original, "_netstorm_wrapper", False):
            continue
        signature = inspect.signature(original)

        def wrapper(*args, _original=original, _signature=signature, **kwargs):
            bound = _signature.bind(*args, **kwargs)
            process = bound.arguments.get("profile_process",
                                          bound.arguments.get("kwargs", {}).get(
                                              "profile_process", "worker"))
            if process == "server" and (NetStorm.created or
                                        not mxnet.profiler.profiler_kvstore_handle.value):
                raise KVStoreError(
                    "MXNet's server-side profiling (profile_process='server') needs MXNet's own "
                    "parameter servers; netstorm's DC servers do not run MXNet's engine. "
                    "Profile the workers (profile_process='worker'); the servers log their "
                    "traffic at shutdown ('WAN chunks sent')")
            return _original(*args, **kwargs)
        wrapper._netstorm_wrapper = True
        wrapper.__doc__, wrapper.__name__ = original.__doc__, original.__name__
        setattr(mxnet.profiler, name, wrapper)


def alias_dist_sync() -> None:
    """Register :class:`NetStorm` under MXNet's synchronous distributed names, and a clear
    refusal under the asynchronous ones (``KVStoreBase.kv_registry``, which
    ``mx.kv.create`` consults before its native stores)."""
    for name in DIST_SYNC_NAMES:
        KVStoreBase.kv_registry[name] = NetStorm
    for name in DIST_ASYNC_NAMES:
        KVStoreBase.kv_registry[name] = DistAsyncRefused


def _route_netstorm_strings() -> None:
    original = mxnet.model._create_kvstore
    if getattr(original, "_netstorm_wrapper", False):
        return

    def _create_kvstore(kvstore, num_device, arg_params):
        if isinstance(kvstore, str) and kvstore.lower() == _NAME:
            kvstore = mxnet.kvstore.create(_NAME)
        return original(kvstore, num_device, arg_params)

    _create_kvstore._netstorm_wrapper = True
    for module in (mxnet.model, mxnet.gluon.trainer, mxnet.module.module):
        module._create_kvstore = _create_kvstore


_route_netstorm_strings()
_refuse_server_profiling()
