"""Which wire id each KVStore key has, and whether an array may be used with it.

:class:`KeyIds` numbers a store's keys as MXNet does (an int key is its own id; str keys
take 0, 1, ... in the order they are initialized) and checks, at the call, that a key was
initialized and that arrays have its shape (and dtype), so bad input raises in the caller's
thread rather than in MXNet's engine. O(1) per key, except naming a clashing str key in an
error (O(keys)); the shape check is O(arrays).
"""
from __future__ import annotations

import mxnet as mx
import numpy as np

from netstorm.geoserver.worker.client import KVStoreError

__all__ = ["KeyIds", "MAX_KEY", "UninitializedKey"]

MAX_KEY = 2 ** 32 - 1


class UninitializedKey(KVStoreError, mx.base.MXNetError):
    """A key used before ``init``: an ``MXNetError``, like MXNet's own stores raise."""


class KeyIds:
    """A store's keys and their wire ids; the declared shapes and dtypes are the worker
    client's (``client.keys``, read at each call)."""

    def __init__(self, client):
        self._client = client
        self._ids: dict = {}            # str key -> id
        self._int_keys: set = set()

    def id(self, key, create: bool = False) -> int:
        """The wire id of ``key``: an int key is its own id; str keys number 0, 1, ... in
        the order they are initialized (every worker initializes the same keys in the same
        order), as in MXNet, whose servers' optimizer sees these ids as parameter indices.
        The two kinds may be mixed unless an int key and a str key would share an id."""
        if not isinstance(key, str):
            if not (isinstance(key, (int, np.integer)) and not isinstance(key, bool)
                    and 0 <= key <= MAX_KEY):
                raise ValueError(f"netstorm keys are str or int in 0..{MAX_KEY}, got {key!r}")
            if create and int(key) < len(self._ids):    # str keys hold ids 0..len-1
                raise ValueError(f"int key {key} is the id of str key "
                                 f"{self._name_of(int(key))!r}: mix the two kinds only with "
                                 f"distinct ids")
            self._int_keys.add(int(key))
            return int(key)
        if key not in self._ids:
            if not create:
                raise UninitializedKey(f"key {key!r} has not been initialized (call init "
                                       f"first)")
            if len(self._ids) in self._int_keys:
                raise ValueError(f"str key {key!r} would take id {len(self._ids)}, which int "
                                 f"key {len(self._ids)} has: mix the two kinds only with "
                                 f"distinct ids")
            self._ids[key] = len(self._ids)
        return self._ids[key]

    def _name_of(self, kid: int) -> str:
        return next(name for name, i in self._ids.items() if i == kid)

    def declared(self, key, arrays, any_dtype: bool = False) -> int:
        """Key id of an initialized key whose shape (and dtype, unless ``any_dtype``: a pull
        converts, as MXNet's does) matches ``arrays``; checked here, at the call, so bad
        input raises in the caller's thread rather than in the engine."""
        kid = self.id(key)
        info = self._client.keys.get(kid)
        if info is None:
            raise UninitializedKey(f"key {key!r} has not been initialized (call init first)")
        for a in arrays:
            if tuple(a.shape) != info.shape or \
                    not any_dtype and np.dtype(a.dtype) != info.dtype:
                raise ValueError(f"key {key!r} is {info.shape} {info.dtype}; got an array "
                                 f"of {tuple(a.shape)} {np.dtype(a.dtype)}")
        return kid
