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

Replayable (``server_restarts``, docs/recovery.md): when a lost DC server is replaced, the
rounds in flight are summed again under a replay policy, so a DC's residuals must be as they
were before its first attempt at them. A DC encodes a key's round ``r + 1`` only after its
workers received round ``r``, which no DC applies before every encode of ``r`` was done; so a
key's rounds are encoded in order and at most one is in flight. With ``replayable`` the
feedback keeps, per key, a copy of its residual (and DGC velocity) from just before its
latest round was first touched, and :meth:`ErrorFeedback.rollback` restores it for the keys
whose latest round is replayed: one more float32 per element (twice the residuals' memory)
and one copy per key and round.

The types themselves (``fp16``, ``2bit``, ``bsc``, ``mpq``, ``int8``, ``topk2bit``: what
goes up and down) are the codecs of :mod:`.registry`; this module is what they share. Only
float32 keys are compressed; a chunk a codec cannot encode (beyond half precision's range,
or not finite) travels dense, exact. Each encode is O(len(chunk)). Pure.
"""
from __future__ import annotations

import math

import numpy as np

from . import payload
from .registry import DOWN, UP, Chunk, codec_for
from ..config.compression import CompressionConfig

__all__ = ["DOWN", "DenseCodec", "ErrorFeedback", "UP", "WanCodec"]


class ErrorFeedback:
    """One DC's residuals and encoder. Memory: one float32 per element of every key
    it has encoded (the model's size once)."""

    def __init__(self, config: CompressionConfig, seed: int = 0, replayable: bool = False):
        """``replayable``: keep what :meth:`rollback` needs (see the module doc)."""
        self.config = config
        self.codec = codec_for(config)     # the type's Codec (registry.CODECS)
        self.seed = seed
        self.replayable = replayable
        self._residual: dict = {}      # key -> float32 array of the key's size
        self._velocity: dict = {}      # key -> float32 array (DGC momentum correction)
        self._before: dict = {}        # key -> (round, residual, velocity) as they were
                                       # before that round (the key's latest) was touched

    def _touch(self, key: int, rnd) -> None:
        """Round ``rnd`` of ``key`` is about to change its residual or velocity: the first
        time, keep a copy of both (replayable only). O(key size) once per key and round."""
        if not self.replayable or rnd is None:
            return
        before = self._before.get(key)
        if before is not None and before[0] >= rnd:
            return
        res, vel = self._residual.get(key), self._velocity.get(key)
        self._before[key] = (rnd, None if res is None else res.copy(),
                             None if vel is None else vel.copy())

    def rollback(self, rounds: dict) -> list:
        """The rounds of each key after ``rounds[key]`` will be encoded again: the keys
        whose latest round touched is later get their residual and velocity back as they
        were before it; the keys rolled back, sorted. Raises :class:`ValueError` naming the
        key when two or more of its rounds after ``rounds[key]`` were touched (the state
        before the first of them is not kept), or when not ``replayable``. O(keys rolled
        back x key size)."""
        rolled = []
        for key, (rnd, res, vel) in sorted(self._before.items()):
            after = rounds.get(key)
            if after is None or rnd <= after:
                continue
            if not self.replayable or rnd > after + 1:
                raise ValueError(f"key {key}: round {rnd} was encoded, so the residuals "
                                 f"before round {after + 1} are not kept")
            for table, saved in ((self._residual, res), (self._velocity, vel)):
                if saved is None:
                    table.pop(key, None)
                else:
                    table[key] = saved
            del self._before[key]
            rolled.append(key)
        return rolled

    def residual(self, key: int, key_size: int) -> np.ndarray:
        res = self._residual.get(key)
        if res is None or len(res) != key_size:
            res = self._residual[key] = np.zeros(key_size, dtype=np.float32)
        return res

    def residual_norm(self) -> float:
        """The L2 norm of every residual held: the mass compression has delayed and not
        sent yet (the metrics). O(model); it copies the table first, so another thread may
        call it."""
        return math.sqrt(sum(float(np.dot(r, r)) for r in list(self._residual.values())))

    def correct(self, key: int, start: int, values, key_size: int, rnd=None):
        """DGC momentum correction of this DC's own contribution to elements
        ``start:start+len(values)`` of ``key``: ``u = momentum * u + values``, returned (a
        new array; ``values`` unchanged). The optimizer then runs without momentum: it is
        applied here, before sparsification, so that coordinates sent late still carry it.
        Identity when ``config.momentum`` is 0 or the key is not float32. ``rnd``: the
        round, for :meth:`rollback`. O(len(values))."""
        if not self.config.momentum or np.dtype(values.dtype) != np.float32:
            return values
        self._touch(key, rnd)
        u = self._velocity.get(key)
        if u is None or len(u) != key_size:
            u = self._velocity[key] = np.zeros(key_size, dtype=np.float32)
        u = u[start:start + len(values)]
        u *= np.float32(self.config.momentum)
        u += values
        return u.copy()

    def scheme(self, direction: str, key_size: int) -> str:
        """The type that encodes a chunk going ``direction`` of a key of ``key_size``
        elements (``mpq`` by the key's size, ``2bit``'s totals in half precision)."""
        return self.codec.pick(direction, key_size).name

    def encode(self, key: int, start: int, values, rnd: int, key_size: int,
               direction: str):
        """``(array, encoded)`` to send for elements ``start:start+len(values)`` of ``key``
        in round ``rnd``: a payload (``encoded``) or, when a payload would not be
        smaller, a dense float32 chunk: the quantized values for 2bit, fp16 and int8 (a
        small key is quantized like any other, as in MXNet), the exact chunk for bsc,
        topk2bit and mpq's sparse part (its residual flushed). The residual absorbs the
        difference. ``values`` is not modified. O(len(values))."""
        if not self.codec.on or np.dtype(values.dtype) != np.float32:
            return values, False
        self._touch(key, rnd)
        res = self.residual(key, key_size)[start:start + len(values)]
        x = values + res
        wire, sent = self.codec.encode(x, res, Chunk(direction, key_size, rnd,
                                                     (self.seed, key, start, rnd)))
        if wire is None:            # cannot be encoded (beyond fp16, not finite): dense, exact
            res[:] = 0
            return x, False
        if len(wire) >= x.nbytes:   # never larger than dense
            if sent is None:        # quantized (2bit, fp16, int8): the same values, dense, as
                return self.codec.decode(wire, len(x)), False  # MXNet quantizes every key
            res[:] = 0              # sparsified: the chunk itself, exact (small keys)
            return x, False
        velocity = self._velocity.get(key)
        if sent is not None and velocity is not None:   # DGC's factor masking: the
            velocity[start:start + len(values)][sent] = 0   # momentum of what went restarts
        return wire, True


class DenseCodec:
    """No compression: chunks travel as they are; a compressed payload is refused."""

    @staticmethod
    def encode(cid, array, direction: str, where=None):
        return array, False

    @staticmethod
    def own(cid, array, where=None):
        return array

    @staticmethod
    def rollback(rounds: dict) -> list:
        return []

    @staticmethod
    def decode(cid, array, encoded: bool, where=None):
        if encoded:
            raise payload.PayloadError("compressed chunk, but compression is off here")
        return array


class WanCodec:
    """:class:`ErrorFeedback` for the tree exchange. Each call is told where the chunk
    lies in its key, ``where = (start, stop, key_size)``, from the layout the store cut
    this DC's contribution by (None when this DC has not contributed to the chunk: it
    encodes such chunks dense). ``max_elements``: the most elements a chunk can have
    (``chunk_bytes`` of float32), the bound on a payload decoded without ``where``."""

    def __init__(self, config: CompressionConfig, seed: int = 0,
                 max_elements: int = 1 << 20, replayable: bool = False):
        self.feedback = ErrorFeedback(config, seed, replayable)
        self.max_elements = max_elements

    def encode(self, cid, array, direction: str, where=None):
        if where is None:
            return array, False
        start, stop, key_size = where
        if stop - start != len(array):
            return array, False
        return self.feedback.encode(cid.key, start, array, cid.rnd, key_size, direction)

    def own(self, cid, array, where=None):
        """This DC's own contribution to a chunk, momentum-corrected (DGC) when configured."""
        if where is None or where[1] - where[0] != len(array):
            return array
        return self.feedback.correct(cid.key, where[0], array, where[2], cid.rnd)

    def rollback(self, rounds: dict) -> list:
        """See :meth:`ErrorFeedback.rollback`."""
        return self.feedback.rollback(rounds)

    def decode(self, cid, array, encoded: bool, where=None):
        if not encoded:
            return array
        if where is not None:
            return self.feedback.codec.decode(array, where[1] - where[0])
        # a child's partial sum may come before this DC contributed to the chunk: the
        # payload's own size, bounded by a chunk's, and the sum checks it against this DC's
        # own contribution when that comes
        n = payload.elements(array)
        if n > self.max_elements:
            raise payload.PayloadError(f"compressed chunk of key {cid.key} not known here "
                                       f"claims {n} elements, more than a chunk's "
                                       f"{self.max_elements}")
        return self.feedback.codec.decode(array, n)
