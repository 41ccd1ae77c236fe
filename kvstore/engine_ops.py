"""MXNet engine operators that make push/pull asynchronous.

``mx.nd.Custom`` returns at once; MXNet runs the operator on its own thread when the inputs
are ready (the gradient after backward) and makes every reader of the output wait for it.
So Trainer's per-parameter ``pushpull`` calls all go out while backward is still running, and
the next forward waits only for the weights it reads. Each key has a one-element *token*
array passed as an auxiliary (mutable) state, so the engine runs one key's operations in
the order they were issued; different keys run concurrently.

:class:`KeyOperators` runs them through one ``CachedOp`` per key and operator, built once:
``mx.nd.Custom`` builds the Python operator and its ctypes callbacks on every call (0.26 ms
of CPU each, and ~145 objects left in reference cycles per call, which the garbage
collector then has to find: resnet18's 62 keys made it run a full collection every few
iterations). A static ``CachedOp`` keeps its operator and writes into the ``out`` it is
given, so the calls stay asynchronous and in order exactly as before.
"""
from __future__ import annotations

import weakref

import mxnet as mx
import numpy as np

from .engine_async import memory_view

__all__ = ["KeyOperators", "PullProp", "PushPullProp", "STATIC", "attach"]

# Operators are instantiated by MXNet from a name and string parameters, so they find their
# client through this table, keyed by a token the store puts in the parameters.
_CLIENTS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def attach(token: str, client) -> None:
    _CLIENTS[token] = client


def _client(token: str):
    client = _CLIENTS.get(token)
    if client is None:
        raise RuntimeError(f"netstorm store {token} is closed")
    return client


def _view(array) -> np.ndarray:
    """Zero-copy flat numpy view of a CPU NDArray's memory (a copy for another context).
    Only valid while the engine holds the array for this operator, i.e. inside
    ``forward``. Read as the asynchronous path reads it (``memory_view``, which never
    waits); MXNet hands custom operators arrays in its default layout."""
    if array.context.device_type != "cpu":
        return array.asnumpy().reshape(-1)
    view = memory_view(array)
    if view is None:
        raise RuntimeError("netstorm: an array in MKL-DNN's blocked layout reached a custom "
                           "operator; reading it in place would wait for the operator itself")
    return view


STATIC = [("static_alloc", "true"), ("static_shape", "true")]   # build once, write into out


class KeyOperators:
    """The store's operators, one ``CachedOp`` per (operator, key, parameters, context),
    built on first use (see the module doc). O(1) per call after the first."""

    def __init__(self, store: str):
        self.store = store
        self._ops: dict = {}
        self._last: dict = {}       # (operator, key) -> (data, params, op) of the last call

    def __call__(self, op_type: str, key: int, data, token, out, **params):
        """Run ``op_type`` on ``data`` for ``key`` (``token``: the key's order), writing
        ``out``; returns ``out``."""
        last = self._last.get((op_type, key))
        if last is not None and last[0] is data and last[1] == params:
            last[2](data, token, out=out)       # the same array as last time: same op
            return out
        ident = (op_type, key, str(data.context), tuple(sorted(params.items())))
        op = self._ops.get(ident)
        if op is None:
            argument = PullProp.ARGUMENT if op_type == "netstorm_pull" else \
                _KeyOpProp.ARGUMENT
            symbol = mx.sym.Custom(**{argument: mx.sym.var(argument)},
                                   token=mx.sym.var("token"), op_type=op_type,
                                   store=self.store, key=str(key), **params)
            op = self._ops[ident] = mx.nd.CachedOp(symbol, flags=STATIC)
        self._last[(op_type, key)] = (data, params, op)
        op(data, token, out=out)
        return out

    def release(self) -> None:
        """Free the operators once the engine is done with them, while Python still runs
        (MXNet calls back into Python to delete an operator; at interpreter exit that
        callback fails). Called by the store's ``close``."""
        try:
            mx.nd.waitall()
        except mx.base.MXNetError:
            pass            # the failure was reported where it happened
        self._ops.clear()
        self._last.clear()


class _KeyOp(mx.operator.CustomOp):
    """An operation on one key of the store; nothing flows back through it."""

    def __init__(self, client, key):
        super().__init__()
        self.client, self.key = client, key

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise NotImplementedError("netstorm operators have no gradient")


def _noting_errors(forward):
    """MXNet turns an operator's exception into an ``MXNetError`` whose text is its own
    (``CustomOpFBFunc``...); the client keeps the real reason, which is what the worker
    then reports if it dies of it (``WorkerClient.last_error``)."""
    def wrapped(self, *args, **kwargs):
        try:
            return forward(self, *args, **kwargs)
        except Exception as exc:
            self.client.note_error(exc)
            raise
    return wrapped


class _PushPull(_KeyOp):
    def __init__(self, client, key, want_value):
        super().__init__(client, key)
        self.want_value = want_value

    @_noting_errors
    def forward(self, is_train, req, in_data, out_data, aux):
        if not self.want_value:     # the send may outlive forward: the client copies
            self.client.start_push(self.key, _view(in_data[0]), False, borrowed=True)
            return
        # memory is no longer needed when forward returns, even if output aliases input
        handle = self.client.start_push(self.key, _view(in_data[0]), True)
        self.client.finish_into(self.key, handle, _view(out_data[0]))


class _Pull(_KeyOp):
    @_noting_errors
    def forward(self, is_train, req, in_data, out_data, aux):
        handle = self.client.start_pull(self.key)
        self.client.finish_into(self.key, handle, _view(out_data[0]))


class _KeyOpProp(mx.operator.CustomOpProp):
    """One input (named by :attr:`ARGUMENT`), one output ``value`` of the input's dtype, and
    the key's one-element ``token`` as an auxiliary state (it orders the key's operations)."""

    ARGUMENT = "data"

    def __init__(self, store, key):
        super().__init__(need_top_grad=False)
        self.store, self.key = store, int(key)

    def list_arguments(self):
        return [self.ARGUMENT]

    def list_outputs(self):
        return ["value"]

    def list_auxiliary_states(self):
        return ["token"]

    def infer_type(self, in_type):
        return [in_type[0]], [in_type[0]], [np.float32]


@mx.operator.register("netstorm_pushpull")
class PushPullProp(_KeyOpProp):
    """Push ``data`` as the next round of ``key``; output the value after that round
    (``want_value=1``) or a dummy scalar (push only)."""

    def __init__(self, store, key, want_value):
        super().__init__(store, key)
        self.want_value = want_value == "1"

    def infer_shape(self, in_shape):
        out = in_shape[0] if self.want_value else [1]
        return [in_shape[0]], [out], [[1]]

    def create_operator(self, ctx, shapes, dtypes):
        return _PushPull(_client(self.store), self.key, self.want_value)


@mx.operator.register("netstorm_pull")
class PullProp(_KeyOpProp):
    """Output the value of ``key`` after this worker's latest push; ``like`` gives the shape."""

    ARGUMENT = "like"

    def infer_shape(self, in_shape):
        return [in_shape[0]], [in_shape[0]], [[1]]

    def create_operator(self, ctx, shapes, dtypes):
        return _Pull(_client(self.store), self.key)
