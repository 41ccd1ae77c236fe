"""Error feedback: what one DC server sends of a chunk, and what it keeps for later.

Every hop re-encodes: a DC adds its residual to the partial sum it is about to send up
(its own DC's sum plus its children's decoded partial sums), sends what the codec keeps,
and keeps the rest as *its own* residual; the root does the same with the total before it
goes down. Mass is delayed, never lost: over any run, the totals applied plus every DC's
residual equal the sum of all contributions. Bytes per tree edge stay bounded whatever
the tree's shape, since each hop encodes within its own budget.

Residuals are kept per key and model coordinate (an array the key's size), so a policy
switch, a multipath split or a detour needs no migration: whatever chunk a coordinate
falls into next, the same residual joins it. A DC encodes each coordinate once per round
(up if it is not the root of that chunk's tree, down if it is), so one residual per
coordinate is enough and none is stranded.

Per type (``config.type``), up / down: ``fp16`` half / half; ``2bit`` MXNet's 2-bit /
half (MXNet's own pull is uncompressed; half keeps the total's magnitude); ``bsc`` top-k /
top-k; ``mpq`` half for keys under ``size_threshold`` elements, else as ``bsc``. Only
float32 keys are compressed; a chunk beyond half precision's range travels dense. Pure.
"""
from __future__ import annotations

import numpy as np

from . import codecs, payload
from ..config.compression import CompressionConfig

UP, DOWN = "up", "down"
FP16_MAX = float(np.finfo(np.float16).max)     # a chunk holding more goes dense


class ErrorFeedback:
    """One DC's residuals and encoder. Memory: one float32 per element of every key
    it has encoded (the model's size once)."""

    def __init__(self, config: CompressionConfig, seed: int = 0):
        self.config = config
        self.seed = seed
        self._residual: dict = {}      # key -> float32 array of the key's size
        self._velocity: dict = {}      # key -> float32 array (DGC momentum correction)

    def residual(self, key: int, key_size: int) -> np.ndarray:
        res = self._residual.get(key)
        if res is None or len(res) != key_size:
            res = self._residual[key] = np.zeros(key_size, dtype=np.float32)
        return res

    def correct(self, key: int, start: int, values, key_size: int):
        """DGC momentum correction of this DC's own contribution to elements
        ``start:start+len(values)`` of ``key``: ``u = momentum * u + values``, returned (a
        new array; ``values`` unchanged). The optimizer then runs without momentum: it is
        applied here, before sparsification, so that coordinates sent late still carry it.
        Identity when ``config.momentum`` is 0 or the key is not float32. O(len(values))."""
        if not self.config.momentum or np.dtype(values.dtype) != np.float32:
            return values
        u = self._velocity.get(key)
        if u is None or len(u) != key_size:
            u = self._velocity[key] = np.zeros(key_size, dtype=np.float32)
        u = u[start:start + len(values)]
        u *= np.float32(self.config.momentum)
        u += values
        return u.copy()

    def scheme(self, direction: str, key_size: int) -> str:
        kind = self.config.type
        if kind == "mpq":
            kind = "fp16" if key_size < self.config.size_threshold else "bsc"
        if kind == "2bit" and direction == DOWN:
            kind = "fp16"
        return kind

    def encode(self, key: int, start: int, values, rnd: int, key_size: int,
               direction: str):
        """``(array, encoded)`` to send for elements ``start:start+len(values)`` of ``key``
        in round ``rnd``: a payload (``encoded``) or, when a payload would not be
        smaller, a dense float32 chunk: the quantized values for 2bit and fp16 (a small
        key is quantized like any other, as in MXNet), the exact chunk for bsc and mpq's
        sparse part (its residual flushed). The residual absorbs the difference.
        ``values`` is not modified. O(len(values))."""
        if not self.config.on or np.dtype(values.dtype) != np.float32:
            return values, False
        res = self.residual(key, key_size)[start:start + len(values)]
        x = values + res
        kind = self.scheme(direction, key_size)
        sent = None         # the coordinates a sparse payload carries
        if kind == "fp16":
            if not np.all(np.abs(x) <= FP16_MAX):
                res[:] = 0      # beyond half precision's range (or not finite): dense
                return x, False
            wire = payload.half(x)
            res[:] = x - x.astype(np.float16).astype(np.float32)
        elif kind == "2bit":
            codes = codecs.quantize_2bit(x, self.config.threshold)
            wire = payload.twobit(codes, self.config.threshold)
            t = np.float32(self.config.threshold)
            res[:] = x
            res[codes == 1] -= t
            res[codes == 2] += t
        else:
            rng = np.random.default_rng((self.seed, key, start, rnd))
            k = codecs.budget(len(x), self.config.ratio_at(rnd))
            idx = codecs.top_k(x, k, rng)
            wire = payload.sparse(idx, x[idx], len(x))
            res[:] = x
            res[idx] = 0
            sent = idx
        if len(wire) >= x.nbytes:   # never larger than dense
            if sent is None:        # quantized (2bit, fp16): the same values, dense, as
                return payload.decode(wire, len(x)), False  # MXNet quantizes every key
            res[:] = 0              # sparsified: the chunk itself, exact (small keys)
            return x, False
        velocity = self._velocity.get(key)
        if sent is not None and velocity is not None:   # DGC's factor masking: the
            velocity[start:start + len(values)][sent] = 0   # momentum of what went restarts
        return wire, True


class DenseCodec:
    """No compression: chunks travel as they are; a compressed payload is refused."""

    @staticmethod
    def encode(cid, array, direction: str):
        return array, False

    @staticmethod
    def own(cid, array):
        return array

    @staticmethod
    def decode(cid, array, encoded: bool):
        if encoded:
            raise payload.PayloadError("compressed chunk, but compression is off here")
        return array


class WanCodec:
    """:class:`ErrorFeedback` for the tree exchange: finds where a chunk lies in its key
    with ``locate(cid) -> (start, stop, key_size)`` (None for a key this DC does not
    know yet; it encodes such chunks dense). ``max_elements``: the most elements a chunk
    can have (``chunk_bytes`` of float32), the bound on a payload of an unknown key."""

    def __init__(self, config: CompressionConfig, locate, seed: int = 0,
                 max_elements: int = 1 << 20):
        self.feedback = ErrorFeedback(config, seed)
        self.locate = locate
        self.max_elements = max_elements

    def encode(self, cid, array, direction: str):
        where = self.locate(cid)
        if where is None:
            return array, False
        start, stop, key_size = where
        if stop - start != len(array):
            return array, False
        return self.feedback.encode(cid.key, start, array, cid.rnd, key_size, direction)

    def own(self, cid, array):
        """This DC's own contribution to a chunk, momentum-corrected (DGC) when configured."""
        where = self.locate(cid)
        if where is None or where[1] - where[0] != len(array):
            return array
        return self.feedback.correct(cid.key, where[0], array, where[2])

    def decode(self, cid, array, encoded: bool):
        if not encoded:
            return array
        where = self.locate(cid)
        if where is not None:
            return payload.decode(array, where[1] - where[0])
        # a child's partial sum may come before this DC's workers declared the key: the
        # payload's own size, bounded by a chunk's, and the sum checks it against this DC's
        # own contribution when that comes
        n = payload.elements(array)
        if n > self.max_elements:
            raise payload.PayloadError(f"compressed chunk of key {cid.key} not known here "
                                       f"claims {n} elements, more than a chunk's "
                                       f"{self.max_elements}")
        return payload.decode(array, n)
