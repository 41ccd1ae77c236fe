"""Asynchronous MXNet engine operations without a thread of their own.

MXNet's ``CustomOp`` runs each call on a thread of its own pool and only completes when the
Python ``forward`` returns, so a push that waits for the network holds that thread, and one
key's operation costs the engine's thread, the custom-op thread, a completion operation and
the NDArray wrappers made for each call: on resnet18's 62 keys that was 30-45 ms of CPU per
step in each worker (docs/benchmarks.md, "Third session"). MXNet's own distributed store
(``KVStoreDist``) and Horovod instead push an *asynchronous* operation
(``Engine::PushAsync``): its function starts the work and returns, and whoever learns that
the work is done calls the engine's ``on_complete``. :class:`AsyncEngine` does the same from
Python through the C API (``MXEnginePushAsyncND``):

- the operation is marked ``kAsync``, so when its inputs are ready at the call (a Trainer's
  gradients after backward) the engine runs its function at once in the calling thread;
  otherwise the engine thread that made them ready runs it;
- the function gets a :class:`Completion`; the worker client's I/O thread calls it once the
  value is written, and the engine then releases the operation's outputs to their readers.

A failed operation must fail like any MXNet operator: its outputs carry the error and every
reader raises ``MXNetError`` with the reason. The engine takes the error as a
``const dmlc::Error*``, which it copies. ``dmlc::Error`` is a ``std::runtime_error`` with no
member of its own, so :func:`_engine_error` builds a ``std::runtime_error`` with the C++
runtime's exported constructor (the copy made by the engine is a genuine ``dmlc::Error``).
That relies on the Itanium C++ ABI of the Linux wheels, so :meth:`AsyncEngine.check` runs
both paths once on scratch arrays before a store uses them, and the store falls back to
custom operators (:mod:`netstorm.kvstore.engine_ops`) where the check cannot run or fails.

Under ``MXNET_ENGINE_TYPE=NaiveEngine`` a push waits until its operation completes and the
engine drops errors; :meth:`AsyncEngine.push` then raises the error itself.
"""
from __future__ import annotations

import ctypes
import itertools
import logging
import math
import platform
import sys
import threading

import mxnet as mx
import numpy as np
from mxnet.base import NDArrayHandle, _LIB, check_call

__all__ = ["AsyncEngine", "Completion", "context_struct", "memory_view"]

log = logging.getLogger("netstorm.kvstore")

# void (*EngineAsyncFunc)(RunContext*, CallbackOnComplete*, void* param): MXNet 1.9's C API
_ASYNC_FUNC = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
# CallbackOnComplete is {void (*fn)(Engine*, void* param, const dmlc::Error*); engine; param}
_ON_COMPLETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_CALLBACK_FIELDS = ctypes.c_void_p * 3
_KASYNC = ctypes.c_int(4)       # FnProperty::kAsync (kNormal, kCopyFromGPU, kCopyToGPU,
                                # kCPUPrioritized, kAsync, ...)
_ERROR_BYTES = 64               # room for a std::runtime_error (16 bytes on x86-64)


def _cxx_runtime():
    """The C++ runtime MXNet uses, with ``std::runtime_error``'s constructor from a C
    string and its destructor; None where that is not the ABI (not Linux x86-64)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    try:
        runtime = ctypes.CDLL("libstdc++.so.6")
        make = runtime._ZNSt13runtime_errorC1EPKc       # runtime_error(const char*)
        free = runtime._ZNSt13runtime_errorD1Ev         # ~runtime_error()
    except (OSError, AttributeError):
        return None
    make.argtypes, make.restype = [ctypes.c_void_p, ctypes.c_char_p], None
    free.argtypes, free.restype = [ctypes.c_void_p], None
    return make, free


class Completion:
    """The engine's ``on_complete`` of one started operation, copied out of the engine's
    frame (the pointer it passes is only valid during the call). Call :meth:`done` or
    :meth:`fail` exactly once, from any thread; later calls are ignored. O(1)."""

    __slots__ = ("_fn", "_engine", "_param", "_runtime", "_lock", "error")

    def __init__(self, on_complete: int, runtime: tuple):
        fields = _CALLBACK_FIELDS.from_address(on_complete)
        self._fn = _ON_COMPLETE(fields[0])
        self._engine, self._param = fields[1], fields[2]
        self._runtime = runtime
        self._lock = threading.Lock()
        self.error: str | None = None   # why it failed (None: it did not, or not yet)

    def _take(self):
        with self._lock:
            fn, self._fn = self._fn, None
        return fn

    def done(self) -> None:
        fn = self._take()
        if fn:
            fn(self._engine, self._param, None)

    def fail(self, reason: str) -> None:
        """Complete with an error: the operation's outputs raise ``MXNetError(reason)``."""
        fn = self._take()
        if not fn:
            return
        self.error = reason
        make, free = self._runtime
        error = ctypes.create_string_buffer(_ERROR_BYTES)
        make(error, reason.encode("utf-8", "replace"))
        try:
            fn(self._engine, self._param, ctypes.addressof(error))    # the engine copies it
        finally:
            free(error)


class _DLTensor(ctypes.Structure):      # DLPack's, as MXNet 1.9 exports it
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int),
                ("device_id", ctypes.c_int), ("ndim", ctypes.c_int),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


def memory_view(array, size: int | None = None, dtype=None) -> np.ndarray | None:
    """A flat numpy view of a CPU NDArray's memory, or None when the array holds MKL-DNN's
    blocked layout (an inference pass reorders convolution weights in place). Never waits:
    MXNet's ``MXNDArrayGetData`` would reorder such an array by an engine operation and wait
    for it, which inside an operation holding the array is a deadlock; its DLPack export
    refuses at once instead (keeping, as MXNet 1.9.1 does on that path, a reference to the
    array: the callers only take it when they fail the operation). Valid while an operation
    holds the array. ``size`` and ``dtype``: its elements and dtype, if known. O(1)."""
    size = math.prod(array.shape) if size is None else size
    dtype = np.dtype(array.dtype) if dtype is None else dtype
    if size == 0:
        return np.empty(0, dtype=dtype)
    exported = ctypes.c_void_p()
    if _LIB.MXNDArrayToDLPack(array.handle, ctypes.byref(exported)) != 0:
        return None
    try:
        tensor = _DLTensor.from_address(exported.value)
        address = tensor.data + tensor.byte_offset
    finally:
        check_call(_LIB.MXNDArrayCallDLPackDeleter(exported))
    memory = (ctypes.c_char * (size * dtype.itemsize)).from_address(address)
    return np.frombuffer(memory, dtype=dtype)


def _handles(arrays) -> ctypes.Array:
    return (NDArrayHandle * len(arrays))(*[a.handle for a in arrays])


def context_struct(array) -> ctypes.Array:
    """MXNet's ``Context`` struct ``{int dev_type; int dev_id}`` of ``array``."""
    ctx = array.context
    return (ctypes.c_int * 2)(ctx.device_typeid, ctx.device_id)


class AsyncEngine:
    """Runs Python functions as asynchronous operations of MXNet's engine. The function
    gets a :class:`Completion` and must arrange for it to be called; an exception it
    raises fails the operation with its text. O(1) per push beyond MXNet's own work."""

    def __init__(self, runtime: tuple, name: bytes = b"netstorm"):
        self._runtime = runtime
        self._name = name
        self.errors_propagate = True    # False under the naive engine (see check)
        self._calls: dict = {}          # ticket -> function, until the engine starts it
        self._tickets = itertools.count(1)
        self._entry = _ASYNC_FUNC(self._start)     # kept alive as long as the engine

    @classmethod
    def checked(cls) -> "AsyncEngine | None":
        """An engine whose success and failure paths were both seen to work here, or None
        (the caller falls back to custom operators)."""
        runtime = _cxx_runtime()
        if runtime is None:
            return None
        engine = cls(runtime)
        try:
            if engine.check():
                return engine
        except mx.base.MXNetError as exc:
            log.warning("netstorm: MXNet's asynchronous engine calls failed their check (%s); "
                        "using custom operators", exc)
        return None

    def check(self) -> bool:
        """Push an operation that writes a value and one that fails: True when the first's
        value arrived and the second's reader raised with the reason, or when the engine
        completed it before the push returned and dropped the error (the naive engine:
        :meth:`push` then raises errors itself)."""
        target = mx.nd.zeros((1,))

        def write(done):
            memory_view(target)[0] = 1
            done.done()
        self.push(write, [], [target])
        if target.asscalar() != 1:
            return False
        failing, reason, started = mx.nd.zeros((1,)), "netstorm engine check", []
        pushed = threading.Event()

        def fail(done):
            started.append(pushed.is_set())
            done.fail(reason)
        try:
            self.push(fail, [], [failing])
            pushed.set()
            failing.wait_to_read()
        except mx.base.MXNetError as exc:
            return reason in str(exc)
        self.errors_propagate = False       # only the naive engine completes in the push
        return started == [False]

    def push(self, function, reads, writes, priority: int = 0, context=None) -> None:
        """Run ``function(completion)`` once ``reads`` can be read and ``writes`` written
        (NDArrays; none in both lists); they stay reserved until it completes. ``context``:
        :func:`context_struct` of the first array written (else read), if known."""
        ticket = next(self._tickets)
        record = [function, None]
        self._calls[ticket] = record
        try:
            check_call(_LIB.MXEnginePushAsyncND(
                self._entry, ctypes.c_void_p(ticket), None,
                context_struct((writes or reads)[0]) if context is None else context,
                _handles(reads), len(reads), _handles(writes), len(writes),
                ctypes.byref(_KASYNC), int(priority), self._name, False))
        except BaseException:
            self._calls.pop(ticket, None)       # never started
            raise
        completion = record[1]      # set once started: at once when the inputs were ready
        if not self.errors_propagate and completion is not None and \
                completion.error is not None:
            raise mx.base.MXNetError(completion.error)

    def _start(self, _run_context, on_complete, ticket) -> None:
        """The engine starts an operation (in the thread that pushed it or made it ready).
        Nothing may escape into the engine: an exception fails the operation."""
        record = self._calls.pop(ticket or 0, None)
        completion = Completion(on_complete, self._runtime)
        if record is None:          # never expected; completing it keeps the engine going
            completion.fail(f"{self._name.decode()}: unknown operation {ticket}")
            return
        record[1] = completion
        try:
            record[0](completion)
        except BaseException as exc:        # noqa: BLE001 - becomes the operator's error
            # "<Name>: ..." would make MXNet raise a builtin of that name (ValueError...);
            # an operator's failure is an MXNetError, as a custom operator's is
            completion.fail(f"{type(exc).__name__} in {self._name.decode()}: {exc}")
