"""The bytes of a compressed chunk: one self-describing payload, validated when decoded.

A payload is a 32-byte header (format, value type, elements ``n`` of the dense chunk,
entries ``count``, a float ``scale``) and a body:

* ``INDEX``: ``count`` ascending indices (uint32, or uint64 when ``n`` exceeds 2**32: exact
  for any tensor size) then ``count`` values;
* ``BITMAP``: ``ceil(n / 8)`` bytes of bits (little-endian bit order) then the values of the
  set bits in order;
* ``HALF``: ``n`` float16 values;
* ``TWOBIT``: ``ceil(n / 4)`` bytes of 2-bit codes (0: 0, 1: +scale, 2: -scale), four per
  byte, first element in the low bits (MXNet packs 16 per float: the same density);
* ``INT8``: ``n`` int8 codes in [-127, 127], each standing for ``code * scale``;
* ``Q2INDEX`` / ``Q2BITMAP``: ``count`` values of 2 bits at given positions: two float32
  levels ``low <= high``, the positions as in INDEX (ascending indices) or BITMAP (bits),
  then ``ceil(count / 4)`` bytes of codes packed as TWOBIT's (bit 1: negative, bit 0:
  ``high``, else ``low``; the last byte's unused codes 0).

:func:`sparse` and :func:`sparse_2bit` pick the smaller of index list and bitmap; a caller
sends the dense chunk itself when a payload would not be smaller (``feedback.py``).
:func:`decode` checks every length, index, code, scale and level against the header and
the chunk's expected size, raising :class:`PayloadError` (a
:class:`~netstorm.geoserver.core.wire.WireError`) instead of trusting a peer. Pure; O(n) per
encode or decode.
"""
from __future__ import annotations

import struct

import numpy as np

from ..core.wire import WireError

__all__ = ["BITMAP", "HALF", "HEADER", "INDEX", "INT8", "LEVELS", "PayloadError", "Q2BITMAP",
           "Q2INDEX", "TWOBIT", "VALUES", "VALUE_CODES", "bitmap_bytes", "decode", "elements",
           "half", "index_bytes", "int8", "q2_bitmap_bytes", "q2_index_bytes", "sparse",
           "sparse_2bit", "twobit"]

HEADER = struct.Struct("<BBxxxxxxQQf4x")       # format, value code, n, count, scale
INDEX, BITMAP, HALF, TWOBIT, INT8, Q2INDEX, Q2BITMAP = 1, 2, 3, 4, 5, 6, 7
LEVELS = np.dtype("<f4")                       # Q2INDEX / Q2BITMAP: two levels
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


def q2_index_bytes(n: int, count: int) -> int:
    return HEADER.size + 2 * LEVELS.itemsize + count * _index_dtype(n).itemsize \
        + (count + 3) // 4


def q2_bitmap_bytes(n: int, count: int) -> int:
    return HEADER.size + 2 * LEVELS.itemsize + (n + 7) // 8 + (count + 3) // 4


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


def _pack2(codes) -> np.ndarray:
    """2-bit ``codes`` four per byte, the first in the low bits, the last byte padded with 0."""
    n = len(codes)
    padded = np.zeros((n + 3) // 4 * 4, dtype=np.uint8)
    padded[:n] = codes
    quads = padded.reshape(-1, 4)
    return (quads[:, 0] | (quads[:, 1] << 2) | (quads[:, 2] << 4)
            | (quads[:, 3] << 6)).astype(np.uint8)


def _unpack2(packed, count: int, what: str) -> np.ndarray:
    """The ``count`` codes of :func:`_pack2`'s bytes; :class:`PayloadError` if the padding
    holds any."""
    codes = np.stack([packed & 3, (packed >> 2) & 3, (packed >> 4) & 3, packed >> 6],
                     axis=1).reshape(-1)
    if np.any(codes[count:]):
        raise PayloadError(f"{what} payload's codes go beyond its {count} entries")
    return codes[:count]


def twobit(codes, scale: float) -> np.ndarray:
    """``codes`` (uint8, 0/1/2 per element) packed four per byte, with ``scale``."""
    return _frame(TWOBIT, None, len(codes), len(codes), float(scale), _pack2(codes))


def int8(codes, scale) -> np.ndarray:
    """``codes`` (int8 in [-127, 127], one per element) with their float32 ``scale``."""
    codes = np.asarray(codes, dtype=np.int8)
    return _frame(INT8, None, len(codes), len(codes), float(scale), codes)


def sparse_2bit(indices, codes, levels, n: int) -> np.ndarray:
    """2-bit ``codes`` (of :func:`~.codecs.two_levels`) at ascending ``indices`` of an
    ``n``-element chunk, with ``levels = (low, high)``, as Q2INDEX or Q2BITMAP, whichever is
    smaller. O(n) for a bitmap, O(count) for an index list."""
    count = len(codes)
    head = np.asarray(levels, dtype=LEVELS)
    if q2_bitmap_bytes(n, count) < q2_index_bytes(n, count):
        bits = np.zeros(n, dtype=bool)
        bits[indices] = True
        return _frame(Q2BITMAP, None, n, count, 0.0, head,
                      np.packbits(bits, bitorder="little"), _pack2(codes))
    return _frame(Q2INDEX, None, n, count, 0.0, head,
                  np.asarray(indices, dtype=_index_dtype(n)), _pack2(codes))


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
    if fmt == INT8:
        _decode_int8(body, n, count, scale, dense)
        return dense
    if fmt in (Q2INDEX, Q2BITMAP):
        _decode_q2(fmt, body, n, count, dense)
        return dense
    if code not in VALUES:
        raise PayloadError(f"unknown value type code {code}")
    vdtype = VALUES[code]
    if fmt == INDEX:
        idtype = _index_dtype(n)
        _expect(body, count * (idtype.itemsize + vdtype.itemsize), "INDEX")
        indices = _indices(body[:count * idtype.itemsize], n, count, "INDEX")
        dense[indices] = body[count * idtype.itemsize:].view(vdtype)
        return dense
    if fmt == BITMAP:
        nbits = (n + 7) // 8
        _expect(body, nbits + count * vdtype.itemsize, "BITMAP")
        dense[_bits(body[:nbits], n, count, "BITMAP")] = body[nbits:].view(vdtype)
        return dense
    raise PayloadError(f"unknown payload format {fmt}")


def _indices(body, n: int, count: int, what: str) -> np.ndarray:
    """The ``count`` ascending indices below ``n`` that ``body`` holds."""
    indices = body.view(_index_dtype(n))
    if count and (indices[-1] >= n or np.any(np.diff(indices.astype(np.int64)) <= 0)):
        raise PayloadError(f"{what} payload's indices are not ascending within the chunk")
    return indices


def _bits(body, n: int, count: int, what: str) -> np.ndarray:
    """The ``n``-element mask of ``count`` set bits that ``body`` (``ceil(n / 8)`` bytes)
    holds, its padding clear."""
    unpacked = np.unpackbits(body, bitorder="little")   # n bits, then padding
    bits = unpacked[:n].view(bool)
    if int(bits.sum()) != count or np.any(unpacked[n:]):
        raise PayloadError(f"{what} payload's bits do not match its {count} values")
    return bits


def _expect(body, nbytes: int, what: str) -> None:
    if len(body) != nbytes:
        raise PayloadError(f"{what} payload body is {len(body)} bytes, expected {nbytes}")


def _positive(scale: float, what: str) -> None:
    if not (np.isfinite(scale) and scale > 0):
        raise PayloadError(f"{what} scale {scale} is not a positive number")


def _decode_twobit(body, n: int, scale: float, dense) -> None:
    _expect(body, (n + 3) // 4, "TWOBIT")
    _positive(scale, "TWOBIT")
    codes = np.stack([body & 3, (body >> 2) & 3, (body >> 4) & 3, body >> 6], axis=1)
    codes = codes.reshape(-1)[:n]
    if np.any(codes == 3):
        raise PayloadError("TWOBIT payload holds the unused code 3")
    np.multiply(_TWOBIT_LEVELS[codes], np.float32(scale), out=dense)


def _decode_int8(body, n: int, count: int, scale: float, dense) -> None:
    _expect(body, n, "INT8")
    if count != n:
        raise PayloadError(f"INT8 payload claims {count} entries, it has one per element ({n})")
    _positive(scale, "INT8")
    codes = body.view(np.int8)
    if np.any(codes == -128):
        raise PayloadError("INT8 payload holds the unused code -128")
    np.multiply(codes.astype(np.float32), np.float32(scale), out=dense)


def _decode_q2(fmt: int, body, n: int, count: int, dense) -> None:
    what = "Q2INDEX" if fmt == Q2INDEX else "Q2BITMAP"
    head = 2 * LEVELS.itemsize
    where = count * _index_dtype(n).itemsize if fmt == Q2INDEX else (n + 7) // 8
    _expect(body, head + where + (count + 3) // 4, what)
    low, high = (float(v) for v in body[:head].view(LEVELS))
    if not (np.isfinite(low) and np.isfinite(high) and 0 <= low <= high):
        raise PayloadError(f"{what} levels {low}, {high} are not numbers 0 <= low <= high")
    codes = _unpack2(body[head + where:], count, what)
    positions = (_indices if fmt == Q2INDEX else _bits)(body[head:head + where], n, count, what)
    levels = np.array([low, high, -low, -high], dtype=np.float32)
    dense[positions] = levels[codes]
