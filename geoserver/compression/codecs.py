"""The lossy steps, one function each, on a float32 chunk already holding its residual.

* :func:`quantize_2bit` - MXNet's 2-bit scheme: ``x >= t`` -> ``+t``, ``x <= -t`` -> ``-t``,
  else 0. O(n).
* :func:`top_k` - the indices of (at most) the ``k`` largest magnitudes, with the threshold
  estimated from a random sample instead of a full sort, as in DGC / GeoMX's BSC. O(n).

What a step does not send stays with the caller as residual (:mod:`.feedback`). Pure.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["EXACT_BELOW", "SAMPLE", "budget", "quantize_2bit", "top_k"]

SAMPLE = 1024          # magnitudes sampled to estimate the top-k threshold
EXACT_BELOW = 4 * SAMPLE   # chunks this small are selected exactly (argpartition)


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
