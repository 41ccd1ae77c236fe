"""The compression types: one class per ``[compression] type`` behind the :class:`Codec`
interface, and the registry that names them (:data:`CODECS`, as horovod's ``Compression``
or PyTorch's ``DDPCommHookType``: a name -> class table).

A codec encodes one float32 chunk that already holds its residual: it returns the payload
(:mod:`.payload`) and sets the residual to what the payload lacks. What every type shares
(the residuals per coordinate, DGC momentum correction, "never larger than dense") stays in
:class:`~.feedback.ErrorFeedback`, which looks its codec up here with :func:`codec_for`.

Adding a type: one class here, one line in :data:`CODECS`, and the parameters it takes in
:data:`~netstorm.geoserver.config.compression.PARAMS` (the setting is checked where the
cluster file is read, by processes that never load a codec, and the configuration imports
nothing: tests/unit/test_import_rules.py). Every encode is O(len(chunk)); a look-up O(1).
Pure.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, NamedTuple

import numpy as np

from . import codecs, payload
from ..config.compression import CompressionConfig, CompressionError

__all__ = ["CODECS", "Chunk", "Codec", "DOWN", "FP16_MAX", "Half", "Int8", "Mixed",
           "NoCompression", "Sparse", "SparseTwoBit", "TwoBit", "UP", "codec_class",
           "codec_for"]

UP, DOWN = "up", "down"
FP16_MAX = float(np.finfo(np.float16).max)     # a chunk holding more goes dense


class Chunk(NamedTuple):
    """What a codec may need to know of a chunk besides its values."""
    direction: str      # UP (a partial sum) or DOWN (the total)
    key_size: int       # elements of its key
    rnd: int            # its round (bsc's warm-up)
    seed: tuple         # of its random sample: (DC seed, key, start in the key, round)


class Codec(ABC):
    """One compression type. ``name``: its ``[compression] type``; ``on``: whether chunks are
    encoded at all (``none`` is not)."""
    name: ClassVar[str]
    on: ClassVar[bool] = True

    def __init__(self, config: CompressionConfig):
        self.config = config

    def pick(self, direction: str, key_size: int) -> "Codec":
        """The codec that encodes a chunk going ``direction`` of a key of ``key_size``
        elements: this one, unless the type mixes (``mpq``, ``2bit``'s totals)."""
        return self

    @abstractmethod
    def encode(self, x, res, chunk: Chunk) -> tuple:
        """``(wire, sent)`` for the float32 chunk ``x`` (its residual already added), with
        ``res`` set to what ``wire`` lacks. ``wire``: the payload, or None when ``x``
        cannot be encoded and travels dense, exact (the caller flushes ``res``). ``sent``:
        the indices a sparse payload selects (exactly for ``bsc``, in 2 bits for
        ``topk2bit``), or None when every element is approximated (a quantizer). When the
        payload would not be smaller than the chunk, a sparse chunk travels exact, a
        quantized one as its decoded payload. O(len(x))."""

    def decode(self, wire, n: int) -> np.ndarray:
        """The dense float32 chunk of ``n`` elements that ``wire`` encodes (a payload says
        its own format); :class:`~.payload.PayloadError` if it does not. O(n)."""
        return payload.decode(wire, n)


class NoCompression(Codec):
    """``none``: chunks travel as they are."""
    name = "none"
    on = False

    def encode(self, x, res, chunk: Chunk) -> tuple:
        return None, None


class Half(Codec):
    """``fp16``: half precision both ways; a chunk beyond its range (or not finite) goes
    dense."""
    name = "fp16"

    def encode(self, x, res, chunk: Chunk) -> tuple:
        if not np.all(np.abs(x) <= FP16_MAX):
            return None, None
        wire = payload.half(x)
        res[:] = x - x.astype(np.float16).astype(np.float32)
        return wire, None


class TwoBit(Codec):
    """``2bit``: MXNet's 2-bit scheme up (``x >= t`` -> ``+t``, ``x <= -t`` -> ``-t``, else
    0), half precision down (MXNet's own pull is uncompressed; half keeps the total's
    magnitude)."""
    name = "2bit"

    def __init__(self, config: CompressionConfig):
        super().__init__(config)
        self._down = Half(config)

    def pick(self, direction: str, key_size: int) -> Codec:
        return self._down if direction == DOWN else self

    def encode(self, x, res, chunk: Chunk) -> tuple:
        if chunk.direction == DOWN:
            return self._down.encode(x, res, chunk)
        codes = codecs.quantize_2bit(x, self.config.threshold)
        wire = payload.twobit(codes, self.config.threshold)
        t = np.float32(self.config.threshold)
        res[:] = x
        res[codes == 1] -= t
        res[codes == 2] += t
        return wire, None


class Sparse(Codec):
    """``bsc``: the sampled top-k both ways, ``ratio_at(round)`` of the elements."""
    name = "bsc"

    def encode(self, x, res, chunk: Chunk) -> tuple:
        rng = np.random.default_rng(chunk.seed)
        k = codecs.budget(len(x), self.config.ratio_at(chunk.rnd))
        idx = codecs.top_k(x, k, rng)
        wire = payload.sparse(idx, x[idx], len(x))
        res[:] = x
        res[idx] = 0
        return wire, idx


class Int8(Codec):
    """``int8``: int8 both ways with one float32 scale per chunk (INTELLECT-1's
    pseudo-gradients): ``scale = max|x| / 127`` (to 8 significant bits, rounded up),
    ``q = round(x / scale)`` in [-127, 127]; each element is off by at most ``scale / 2``,
    kept as residual. A chunk not finite goes dense, exact. 1 byte per element plus the
    payload's 32-byte header (which holds the scale)."""
    name = "int8"

    def encode(self, x, res, chunk: Chunk) -> tuple:
        peak = float(np.max(np.abs(x))) if len(x) else 0.0
        if not np.isfinite(peak):           # NaN or inf: no scale fits
            return None, None
        scale = codecs.int8_scale(peak)
        codes = codecs.quantize_int8(x, scale)
        res[:] = x - codes.astype(np.float32) * scale
        return payload.int8(codes, scale), None


class SparseTwoBit(Codec):
    """``topk2bit`` (SparseLoCo): the sampled top-k of ``bsc`` (``ratio_at(round)`` of the
    elements), each value sent in 2 bits, its sign and one of two magnitudes per chunk
    (:func:`~.codecs.two_levels`), both ways: the root re-selects from the total plus its
    residual. The residual keeps the elements not sent and the quantization error of those
    sent. A chunk not finite goes dense, exact. Per element: ``ratio * (index + 1/4)`` bytes
    (or 1/8 + ``ratio / 4`` as a bitmap), plus 40 bytes per chunk (header, two levels)."""
    name = "topk2bit"

    def encode(self, x, res, chunk: Chunk) -> tuple:
        if not np.all(np.isfinite(x)):
            return None, None
        rng = np.random.default_rng(chunk.seed)
        k = codecs.budget(len(x), self.config.ratio_at(chunk.rnd))
        idx = codecs.top_k(x, k, rng)
        codes, levels = codecs.two_levels(x[idx])
        res[:] = x
        res[idx] -= codecs.two_level_values(codes, levels)
        return payload.sparse_2bit(idx, codes, levels, len(x)), idx


class Mixed(Codec):
    """``mpq``: keys under ``size_threshold`` elements as ``fp16``, larger ones as ``bsc``."""
    name = "mpq"

    def __init__(self, config: CompressionConfig):
        super().__init__(config)
        self._small, self._large = Half(config), Sparse(config)

    def pick(self, direction: str, key_size: int) -> Codec:
        return self._small if key_size < self.config.size_threshold else self._large

    def encode(self, x, res, chunk: Chunk) -> tuple:
        return self.pick(chunk.direction, chunk.key_size).encode(x, res, chunk)


CODECS: dict = {            # [compression] type -> its class
    "none": NoCompression,
    "2bit": TwoBit,
    "fp16": Half,
    "bsc": Sparse,
    "mpq": Mixed,
    "int8": Int8,
    "topk2bit": SparseTwoBit,
}


def codec_class(name: str) -> type:
    """The class registered as ``name``; :class:`CompressionError` naming
    ``[compression] type`` and the known names if there is none."""
    cls = CODECS.get(name)
    if cls is None:
        raise CompressionError(f"[compression] type {name!r} has no codec; known: "
                               f"{', '.join(repr(n) for n in CODECS)}")
    return cls


def codec_for(config: CompressionConfig) -> Codec:
    """The codec of ``config.type``, made with ``config``."""
    return codec_class(config.type)(config)
