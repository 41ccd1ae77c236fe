"""The ``'netstorm'`` kvstore for MXNet 1.9 (``netstorm.kvstore``).

Importing it registers the store (``import netstorm`` does so once MXNet is imported):
``mx.kv.create('netstorm')``, ``gluon.Trainer(..., kvstore='netstorm')`` and
``Module.fit(kvstore='netstorm')`` then use it.

MXNet's ``_create_kvstore`` skips any kvstore *string* without ``'dist'`` in it when a worker
has a single device, which would make ``kvstore='netstorm'`` silently train alone. Importing
this package therefore also routes the string ``'netstorm'`` through ``mx.kv.create`` in the
three places that call ``_create_kvstore`` (``mxnet.model``, ``gluon.trainer``,
``module.module``); every other kvstore string behaves as before.
"""
from __future__ import annotations

import mxnet.gluon.trainer
import mxnet.model
import mxnet.module.module

from .netstorm import NetStorm

__all__ = ["NetStorm"]

_NAME = NetStorm.__name__.lower()


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
