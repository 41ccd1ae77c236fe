"""The lossy steps, one function each, on a float32 chunk already holding its residual.

* :func:`quantize_2bit` - MXNet's 2-bit scheme: ``x >= t`` -> ``+t``, ``x <= -t`` -> ``-t``,
  else 0. O(n).
* :func:`top_k` - the indices of (at most) the ``k`` largest magnitudes, with the threshold
  estimated from a random sample instead of a full sort, as in DGC / GeoMX's BSC. O(n).
* :func:`int8_scale`, :func:`quantize_int8` - int8 with one scale per chunk (``max|x| /
  127``), as INTELLECT-1 sends its pseudo-gradients. O(n).
* :func:`two_levels` - 2 bits per value: its sign and one of two magnitudes (SparseLoCo's
  top-k values, 2-bit). O(len(values)).

Scales and levels are kept to :data:`SIGNIFICANT_BITS` significant bits (bfloat16's
precision, far finer than the steps they quantize with): a level times a small integer is
then exact in float32, so dequantizing is exact on every DC and, on inputs of few
significant bits, so is every sum of error feedback (what lets the tests check that mass is
conserved with equality).

What a step does not send stays with the caller as residual (:mod:`.feedback`). Pure.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["EXACT_BELOW", "INT8_MAX", "SAMPLE", "SIGNIFICANT_BITS", "budget", "int8_scale",
           "quantize_2bit", "quantize_int8", "shorten", "top_k", "two_level_values", "two_levels"]

SAMPLE = 1024          # magnitudes sampled to estimate the top-k threshold
EXACT_BELOW = 4 * SAMPLE   # chunks this small are selected exactly (argpartition)
SIGNIFICANT_BITS = 8   # of a scale or level (bfloat16's): float32 keeps 24
INT8_MAX = 127         # int8 codes are in [-127, 127] (symmetric: -128 is never sent)
_DROP = 24 - SIGNIFICANT_BITS
_LARGEST = (0x7F7FFFFF >> _DROP) << _DROP     # bits of the largest float32 so shortened


def quantize_2bit(x, threshold: float) -> np.ndarray:
    """Codes for :func:`~.payload.twobit`: 1 where ``x >= threshold``, 2 where ``x <=
    -threshold``, 0 elsewhere (MXNet's ``quantize_2bit``)."""
    t = np.float32(threshold)
    codes = np.zeros(len(x), dtype=np.uint8)
    codes[x >= t] = 1
    codes[x <= -t] = 2
    return codes


def budget(n: int, ratio: float) -> int:
    """Elements a hop may send of an ``n``-element chunk at ``ratio`` (at least one)."""
    return min(n, max(1, math.ceil(ratio * n)))


def top_k(x, k: int, rng) -> np.ndarray:
    """Ascending indices of at most ``k`` elements of ``x`` with the largest magnitudes,
    zeros left out. Above :data:`EXACT_BELOW` elements the threshold is the matching
    quantile of :data:`SAMPLE` random magnitudes; if more pass it, the largest ``k`` of
    those are kept (the budget is never exceeded); if far fewer do, an exact selection
    follows. O(n)."""
    n = len(x)
    if k >= n:
        idx = np.arange(n)
    else:
        mag = np.abs(x)
        idx = None
        if n > EXACT_BELOW:
            sample = mag[rng.integers(0, n, SAMPLE)]
            above = max(1, math.ceil(SAMPLE * k / n))
            threshold = np.partition(sample, SAMPLE - above)[SAMPLE - above]
            idx = np.flatnonzero(mag >= threshold)
            if len(idx) > k:
                idx = idx[np.argpartition(mag[idx], len(idx) - k)[len(idx) - k:]]
            elif len(idx) < k // 2:
                idx = None
        if idx is None:
            idx = np.argpartition(mag, n - k)[n - k:]
        idx.sort()
    return idx[x[idx] != 0]


def shorten(value: float, up: bool = False) -> np.float32:
    """``value`` (finite, >= 0) as a float32 of :data:`SIGNIFICANT_BITS` significant bits:
    the nearest, or with ``up`` the smallest not below ``value``. Never infinite: beyond
    the largest such float32 (about 3.39e38) that one. O(1)."""
    f = np.float32(value)
    if up and float(f) < value:
        with np.errstate(over="ignore"):
            f = np.nextafter(f, np.float32(np.inf))
    bits = int(np.array(f).view(np.uint32))
    rounded = (bits + ((1 << _DROP) - 1 if up else 1 << (_DROP - 1))) >> _DROP << _DROP
    return np.array(min(rounded, _LARGEST), np.uint32).view(np.float32)[()]


def int8_scale(peak: float) -> np.float32:
    """The scale of a chunk whose largest magnitude is ``peak`` (finite): ``peak / 127``
    rounded up to :data:`SIGNIFICANT_BITS` significant bits, so that every element
    quantizes within [-127, 127]; 1 for an all-zero chunk (any positive scale would do)."""
    return shorten(peak / INT8_MAX, up=True) if peak > 0 else np.float32(1)


def quantize_int8(x, scale) -> np.ndarray:
    """int8 codes of the finite chunk ``x``: ``round(x / scale)`` clipped to [-127, 127]
    (in float64: the division's rounding never moves a code, so ``|x - code * scale| <=
    scale / 2``). ``code * scale`` is exact in float32 (7 bits times 8)."""
    q = np.rint(np.asarray(x, np.float64) / float(scale))
    np.clip(q, -INT8_MAX, INT8_MAX, out=q)
    return q.astype(np.int8)


def two_levels(values) -> tuple:
    """``(codes, (low, high))`` quantizing nonzero finite ``values`` to 2 bits each: bit 1
    the sign, bit 0 which of two magnitudes (0: ``low``, 1: ``high``); code ``c`` decodes to
    ``(-1 if c & 2 else 1) * (high if c & 1 else low)``. The magnitudes split at their mean
    and each level is its group's mean (the least squared error for that split, one Lloyd
    step of 2-means), to :data:`SIGNIFICANT_BITS` bits; ``low == high`` when all fall in one
    group; ``(0, 0)`` for no values. The sign is never wrong: a value sent moves its
    coordinate the right way. O(len(values))."""
    values = np.asarray(values, np.float32)
    if not len(values):
        return np.zeros(0, np.uint8), (np.float32(0), np.float32(0))
    mags = np.abs(values).astype(np.float64)
    high = mags >= mags.mean()
    level_high = shorten(mags[high].mean())
    level_low = shorten(mags[~high].mean()) if not high.all() else level_high
    codes = high.astype(np.uint8) | ((values < 0).astype(np.uint8) << 1)
    return codes, (level_low, level_high)


def two_level_values(codes, levels) -> np.ndarray:
    """The float32 values ``codes`` of :func:`two_levels` stand for with ``levels``."""
    low, high = np.float32(levels[0]), np.float32(levels[1])
    return np.array([low, high, -low, -high], np.float32)[np.asarray(codes, np.intp)]
