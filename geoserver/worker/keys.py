"""The keys a worker declared (:class:`KeyInfo`: shape, dtype, rounds pushed) and how a
key's value travels between the worker and its DC's server: one frame each way (ZeroMQ
delivers a message whole anyway; the server cuts it into WAN chunks). Pure: no sockets."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..compression.feedback import UP
from ..core.wire import Flag, Message, WireError, dtype_code
from .settings import KVStoreError

__all__ = ["KeyInfo", "declare", "frames", "push_frame", "value"]


@dataclass
class KeyInfo:
    key: int
    shape: tuple
    dtype: np.dtype
    pushes: int = 0
    inits: int = 0
    received: int = 0       # rounds the server already has from this rank (a rejoined one)

    def __post_init__(self):
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize


def declare(keys: dict, key: int, shape, dtype) -> KeyInfo:
    """``key`` in ``keys`` (added if new) as ``shape`` and ``dtype``; a key declared
    otherwise before, or of a dtype the wire cannot carry, raises :class:`KVStoreError`."""
    shape, dtype = tuple(int(s) for s in shape), np.dtype(dtype)
    try:
        dtype_code(dtype)
    except WireError as exc:
        raise KVStoreError(f"key {key}: {exc}") from None
    info = keys.get(key)
    if info is None:
        info = keys[key] = KeyInfo(key, shape, dtype)
    elif (info.shape, info.dtype) != (shape, dtype):
        raise KVStoreError(f"key {key} was initialized as {info.shape} {info.dtype}, "
                           f"not {shape} {dtype}")
    return info


def frames(info: KeyInfo, array: np.ndarray) -> list:
    """``array`` as the frames of a message about key ``info``: one flat frame."""
    return [np.ascontiguousarray(array, dtype=info.dtype).reshape(-1)]


def push_frame(info: KeyInfo, grad: np.ndarray, copy: bool, codec) -> tuple:
    """``(frame, flags)`` of the push of ``grad`` as round ``info.pushes``: copied if
    ``copy`` (the caller reuses its buffer), and compressed by ``codec`` (an
    :class:`~netstorm.geoserver.compression.feedback.ErrorFeedback`, compression scope
    ``"all"``; None: off) where that is smaller (``Flag.ENCODED``). O(key size)."""
    frame, = frames(info, grad)
    if copy:
        frame = frame.copy()
    if codec is None:
        return frame, Flag.NONE
    frame, encoded = codec.encode(info.key, 0, frame, info.pushes, frame.size, UP)
    return frame, Flag.ENCODED if encoded else Flag.NONE


def value(info: KeyInfo, reply: Message) -> np.ndarray:
    """The value of key ``info`` a reply carries, in the key's shape; one frame of the
    key's size, or :class:`KVStoreError`."""
    arrays = reply.arrays()
    if len(arrays) != 1 or arrays[0].size != math.prod(info.shape):
        raise KVStoreError(f"value of key {info.key}: expected one frame of "
                           f"{math.prod(info.shape)} elements, got "
                           f"{[a.size for a in arrays]}")
    return arrays[0].reshape(info.shape)
