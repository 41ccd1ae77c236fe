"""The store's three operations on one key, as MXNet engine operations: push a round and
take its value (``pushpull``), push only, pull.

Each reads and writes NDArrays through the engine, so they stay asynchronous and ordered
like any MXNet operator: every operation of a key also writes the key's one-element
*token*, so one key's operations run in the order they were issued and different keys run
concurrently. Two implementations with one interface, chosen once per store by
:func:`key_operations`:

- :class:`AsyncKeyOps` (the default): asynchronous engine operations
  (:mod:`netstorm.kvstore.engine_async`) that start the request and return; the worker
  client's I/O thread writes the value and completes the operation. No thread is held
  while the network works.

  Values land in the gradient itself for an in-place ``pushpull`` (a Trainer's allreduce),
  else in a per-key staging array that MXNet then copies into the output: an output may be a
  weight that an inference pass left in MKL-DNN's blocked layout, which only MXNet's own copy
  writes correctly (reading its memory directly would make MXNet reorder it, and wait, inside
  the operation: a deadlock). An input in that layout (which gradients never are) fails the
  operation with that reason.
- :class:`CustomKeyOps`: the custom operators of :mod:`netstorm.kvstore.engine_ops`, where
  the asynchronous engine calls failed their check, and for arrays not on a CPU context.
"""
from __future__ import annotations

import logging
import math

import mxnet as mx
import numpy as np

from netstorm.geoserver.worker.settings import KVStoreError

from . import engine_ops
from .arguments import ArgumentChecks
from .engine_async import AsyncEngine, context_struct, memory_view

__all__ = ["AsyncKeyOps", "CustomKeyOps", "key_operations"]

log = logging.getLogger("netstorm.kvstore")


def _noted(client, start):
    """``start(done)``, keeping what it raises as the client's last error (the reason the
    worker reports if it dies of MXNet's wrapper of it)."""
    def noted(done):
        try:
            start(done)
        except Exception as exc:
            client.note_error(exc)
            raise
    return noted


class CustomKeyOps:
    """Through custom operators (one ``CachedOp`` per key, see engine_ops). A push-only
    writes a one-element dummy per key (a custom operator needs an output)."""

    def __init__(self, store_token: str):
        self._ops = engine_ops.KeyOperators(store_token)
        self._dummies: dict = {}    # key id -> the push operator's (unread) output

    def pushpull(self, kid, data, out, token, priority=0, fresh_out=False) -> None:
        self._ops("netstorm_pushpull", kid, data, token, out, want_value="1")

    def push(self, kid, data, token, priority=0) -> None:
        dummy = self._dummies.get(kid)
        if dummy is None or dummy.context != data.context:
            dummy = self._dummies[kid] = mx.nd.zeros((1,), ctx=data.context)
        self._ops("netstorm_pushpull", kid, data, token, dummy, want_value="0")

    def pull(self, kid, out, token, priority=0) -> None:
        self._ops("netstorm_pull", kid, out, token, out)

    def release(self) -> None:
        self._ops.release()


class AsyncKeyOps:
    """Through asynchronous engine operations (see the module doc). The engine starts one
    in the thread that pushed it, when its inputs are ready then, else in the engine thread
    that made them ready; a failure becomes the ``MXNetError`` its outputs' readers raise.
    Arrays on other contexts than the CPU go through ``fallback``. O(1) per call beyond
    the request itself, plus one copy of the value into an output that is not the input."""

    def __init__(self, client, engine: AsyncEngine, fallback: CustomKeyOps):
        self._client, self._engine, self._fallback = client, engine, fallback
        self._staging: dict = {}    # key id -> where its values land before MXNet's copy
        self._seen = ArgumentChecks()   # the arrays' facts (see _facts)

    def pushpull(self, kid, data, out, token, priority=0, fresh_out=False) -> None:
        """``fresh_out``: ``out`` is the store's own new array (written directly)."""
        facts = self._facts("pushpull", kid, data, out)
        if facts is None:
            self._fallback.pushpull(kid, data, out, token, priority)
            return
        context, (data_shape, target_shape) = facts
        target = out
        if out is not data and not fresh_out:
            target, context = self._staged(kid, out)    # shaped like out
        client = self._client

        def start(done):
            handle = client.start_push(kid, _memory(data, kid, data_shape), True)
            self._finish_later(kid, handle, _memory(target, kid, target_shape), done)
        self._push(start, [] if data is target else [data], [target, token], priority,
                   context)
        if target is not out:
            target.copyto(out)

    def push(self, kid, data, token, priority=0) -> None:
        facts = self._facts("push", kid, data)
        if facts is None:
            self._fallback.push(kid, data, token, priority)
            return
        context, (data_shape,) = facts
        client = self._client

        def start(done):    # the request keeps a copy: the engine may reuse data at once
            client.start_push(kid, _memory(data, kid, data_shape), False, borrowed=True)
            done.done()
        self._push(start, [data], [token], priority, context)

    def pull(self, kid, out, token, priority=0) -> None:
        facts = self._facts("pull", kid, out)
        if facts is None:
            self._fallback.pull(kid, out, token, priority)
            return
        (target, context), (target_shape,) = self._staged(kid, out), facts[1]
        client = self._client

        def start(done):
            handle = client.start_pull(kid)
            self._finish_later(kid, handle, _memory(target, kid, target_shape), done)
        self._push(start, [], [target, token], priority, context)
        target.copyto(out)

    def _facts(self, method: str, kid, *arrays):
        """``(context struct, [(elements, dtype) of each array])`` when every array is on
        the CPU, else None; remembered for the arrays last passed for this key and method
        (a Trainer passes the same ones every step, and each read is a C call into MXNet).
        The arrays are held with their facts, so a later array at the same address is
        never taken for one of them. O(arrays)."""
        return self._seen.once(method, kid, arrays, lambda: _cpu_facts(arrays))

    def release(self) -> None:
        self._fallback.release()

    def _staged(self, kid, out) -> tuple:
        """The key's staging array, like ``out`` (the engine orders its reuse), and its
        :func:`context_struct`."""
        staged = self._staging.get(kid)
        if staged is None or staged[1] is not out and (staged[0].shape != out.shape or
                                                       staged[0].dtype != out.dtype):
            array = mx.nd.empty(out.shape, dtype=out.dtype)
            staged = self._staging[kid] = (array, out, context_struct(array))
        return staged[0], staged[2]

    def _finish_later(self, kid, handle, target, done) -> None:
        """Once the request is answered (in the client's I/O thread): the value into
        ``target``, then complete; a failed request fails the operation with its reason."""
        client = self._client

        def finish():
            try:
                client.finish_into(kid, handle, target)
            except Exception as exc:        # noqa: BLE001 - the operation carries it
                client.note_error(exc)
                done.fail(f"{type(exc).__name__}: {exc}")
                return
            done.done()
        client.when_answered(handle, finish)

    def _push(self, start, reads, writes, priority, context) -> None:
        """(The arrays written are the key's own - its staging array, its token - or the
        pushed array itself, read through the same reservation: never an input's view.)"""
        self._engine.push(_noted(self._client, start), reads, writes, priority, context)


def _cpu_facts(arrays):
    """What :meth:`AsyncKeyOps._facts` returns, read from MXNet."""
    if not all(a.context.device_type == "cpu" for a in arrays):
        return None
    return (context_struct(arrays[0]),
            [(math.prod(a.shape), np.dtype(a.dtype)) for a in arrays])


def _memory(array, kid, shape):
    """``array``'s memory (``shape``: its elements and dtype), or the reason it cannot be
    read in place."""
    view = memory_view(array, *shape)
    if view is None:
        raise KVStoreError(f"key {kid}: an array in MKL-DNN's blocked layout (an inference "
                           f"pass leaves convolution weights so) cannot be pushed as it is; "
                           f"push a copy of it (array.copy())")
    return view


def key_operations(client, store_token: str):
    """:class:`AsyncKeyOps` where MXNet's asynchronous engine calls pass their check here,
    else :class:`CustomKeyOps` (logged)."""
    fallback = CustomKeyOps(store_token)
    engine = AsyncEngine.checked()
    if engine is None:
        log.warning("netstorm: MXNet's asynchronous engine calls are not usable here; each "
                    "key's operations run as custom operators (slower per key)")
        return fallback
    return AsyncKeyOps(client, engine, fallback)
