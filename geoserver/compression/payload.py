"""The bytes of a compressed chunk: one self-describing payload, validated when decoded.

A payload is a 24-byte header (format, value type, elements ``n`` of the dense chunk,
entries ``count``, a float ``scale``) and a body:

* ``INDEX``: ``count`` ascending indices (uint32, or uint64 when ``n`` exceeds 2**32: exact
  for any tensor size) then ``count`` values;
* ``BITMAP``: ``ceil(n / 8)`` bytes of bits (little-endian bit order) then the values of the
  set bits in order;
* ``HALF``: ``n`` float16 values;
* ``TWOBIT``: ``ceil(n / 4)`` bytes of 2-bit codes (0: 0, 1: +scale, 2: -scale), four per
  byte, first element in the low bits (MXNet packs 16 per float: the same density).

:func:`sparse` picks the smaller of INDEX and BITMAP; a caller sends the dense chunk itself
when a payload would not be smaller (``feedback.py``). :func:`decode` checks every
length, index and code against the header and the chunk's expected size, raising
:class:`PayloadError` (a :class:`~netstorm.geoserver.core.wire.WireError`) instead of trusting
a peer. Pure; O(n) per encode or decode.
"""
from __future__ import annotations

import struct

import numpy as np

from ..core.wire import WireError

__all__ = ["BITMAP", "HALF", "HEADER", "INDEX", "PayloadError", "TWOBIT", "VALUES", "VALUE_CODES",
           "bitmap_bytes", "decode", "elements", "half", "index_bytes", "sparse", "twobit"]

HEADER = struct.Struct("<BBxxxxxxQQf4x")       # format, value code, n, count, scale
INDEX, BITMAP, HALF, TWOBIT = 1, 2, 3, 4
VALUES = {1: np.dtype("<f4"), 2: np.dtype("<f2")}
VALUE_CODES = {dt: code for code, dt in VALUES.items()}
_TWOBIT_LEVELS = np.array([0.0, 1.0, -1.0, np.nan], dtype=np.float32)   # code 3 is invalid


class PayloadError(WireError):
    """A compressed payload that does not decode to the chunk it claims; says why."""


def _index_dtype(n: int) -> np.dtype:
    return np.dtype("<u4") if n <= 1 << 32 else np.dtype("<u8")


def _frame(fmt: int, value_dtype, n: int, count: int, scale: float, *bodies) -> np.ndarray:
    code = VALUE_CODES.get(np.dtype(value_dtype), 0) if value_dtype is not None else 0
    header = np.frombuffer(HEADER.pack(fmt, code, n, count, scale), dtype=np.uint8)
    return np.concatenate([header, *(np.ascontiguousarray(b).view(np.uint8).reshape(-1)
                                     for b in bodies)])


def index_bytes(n: int, count: int, value_dtype=np.float32) -> int:
    return HEADER.size + count * (_index_dtype(n).itemsize + np.dtype(value_dtype).itemsize)


def bitmap_bytes(n: int, count: int, value_dtype=np.float32) -> int:
    return HEADER.size + (n + 7) // 8 + count * np.dtype(value_dtype).itemsize


def sparse(indices, values, n: int) -> np.ndarray:
    """``values`` at ascending ``indices`` of an ``n``-element chunk (zero elsewhere), as
    INDEX or BITMAP, whichever is smaller. O(n) for a bitmap, O(count) for an index list."""
    values = np.asarray(values)
    count = len(values)
    if bitmap_bytes(n, count, values.dtype) < index_bytes(n, count, values.dtype):
        bits = np.zeros(n, dtype=bool)
        bits[indices] = True
        return _frame(BITMAP, values.dtype, n, count, 0.0,
                      np.packbits(bits, bitorder="little"), values)
    return _frame(INDEX, values.dtype, n, count, 0.0,
                  np.asarray(indices, dtype=_index_dtype(n)), values)


def half(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float16)
    return _frame(HALF, np.float16, len(values), len(values), 0.0, values)


def twobit(codes, scale: float) -> np.ndarray:
    """``codes`` (uint8, 0/1/2 per element) packed four per byte, with ``scale``."""
    n = len(codes)
    padded = np.zeros((n + 3) // 4 * 4, dtype=np.uint8)
    padded[:n] = codes
    quads = padded.reshape(-1, 4)
    packed = quads[:, 0] | (quads[:, 1] << 2) | (quads[:, 2] << 4) | (quads[:, 3] << 6)
    return _frame(TWOBIT, None, n, n, float(scale), packed.astype(np.uint8))


def _header(payload) -> tuple:
    """``(bytes as uint8, (format, value code, n, count, scale))``; :class:`PayloadError`
    if the header is missing."""
    buf = np.frombuffer(payload, dtype=np.uint8)
    if len(buf) < HEADER.size:
        raise PayloadError(f"payload of {len(buf)} bytes is shorter than its header")
    return buf, HEADER.unpack(buf[:HEADER.size].tobytes())


def elements(payload) -> int:
    """How many elements ``payload`` says it encodes (its header only; :func:`decode`
    checks the rest). :class:`PayloadError` if the header is missing."""
    return _header(payload)[1][2]


def decode(payload, n: int) -> np.ndarray:
    """The dense float32 chunk of ``n`` elements that ``payload`` encodes.
    :class:`PayloadError` if it is malformed or of another size."""
    buf, (fmt, code, size, count, scale) = _header(payload)
    if size != n:
        raise PayloadError(f"payload encodes {size} elements, the chunk has {n}")
    if count > n:
        raise PayloadError(f"payload claims {count} entries in {n} elements")
    body = buf[HEADER.size:]
    dense = np.zeros(n, dtype=np.float32)
    if fmt == TWOBIT:
        _decode_twobit(body, n, scale, dense)
        return dense
    if fmt == HALF:
        _expect(body, n * 2, "HALF")
        dense[:] = body.view("<f2")
        return dense
    if code not in VALUES:
        raise PayloadError(f"unknown value type code {code}")
    vdtype = VALUES[code]
    if fmt == INDEX:
        idtype = _index_dtype(n)
        _expect(body, count * (idtype.itemsize + vdtype.itemsize), "INDEX")
        indices = body[:count * idtype.itemsize].view(idtype)
        if count and (indices[-1] >= n or np.any(np.diff(indices.astype(np.int64)) <= 0)):
            raise PayloadError("INDEX payload's indices are not ascending within the chunk")
        dense[indices] = body[count * idtype.itemsize:].view(vdtype)
        return dense
    if fmt == BITMAP:
        nbits = (n + 7) // 8
        _expect(body, nbits + count * vdtype.itemsize, "BITMAP")
        unpacked = np.unpackbits(body[:nbits], bitorder="little")   # n bits, then padding
        bits = unpacked[:n].view(bool)
        if int(bits.sum()) != count or np.any(unpacked[n:]):
            raise PayloadError(f"BITMAP payload's bits do not match its {count} values")
        dense[bits] = body[nbits:].view(vdtype)
        return dense
    raise PayloadError(f"unknown payload format {fmt}")


def _expect(body, nbytes: int, what: str) -> None:
    if len(body) != nbytes:
        raise PayloadError(f"{what} payload body is {len(body)} bytes, expected {nbytes}")


def _decode_twobit(body, n: int, scale: float, dense) -> None:
    _expect(body, (n + 3) // 4, "TWOBIT")
    if not (np.isfinite(scale) and scale > 0):
        raise PayloadError(f"TWOBIT scale {scale} is not a positive number")
    codes = np.stack([body & 3, (body >> 2) & 3, (body >> 4) & 3, body >> 6], axis=1)
    codes = codes.reshape(-1)[:n]
    if np.any(codes == 3):
        raise PayloadError("TWOBIT payload holds the unused code 3")
    np.multiply(_TWOBIT_LEVELS[codes], np.float32(scale), out=dense)
