"""What compression is in force: one typed setting for the whole cluster.

Users write MXNet's own dict (``kv.set_gradient_compression({'type': '2bit', 'threshold':
0.5})``, ``gluon.Trainer(..., compression_params=...)``) or a ``[compression]`` table in
the cluster file; both become a :class:`CompressionConfig`, checked here once with errors
that name the field and the accepted values. ``type`` names a codec of
:data:`netstorm.geoserver.compression.registry.CODECS` (this package imports nothing, so
:data:`PARAMS` lists the types and their parameters here; a test checks both agree). Pure.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from .tables import check_kind, chosen_params

__all__ = ["CompressionConfig", "CompressionError", "DEFAULT_RATIO", "DEFAULT_SIZE_THRESHOLD",
           "DEFAULT_THRESHOLD", "DEFAULT_WARMUP_ROUNDS", "MAX_COUNT", "MAX_THRESHOLD", "PARAMS",
           "REFUSED", "SCOPES", "TYPES"]

SCOPES = ("wan", "all")        # between DC servers; "all": the workers' pushes to them too
DEFAULT_THRESHOLD = 0.5        # MXNet's own default for 2bit
DEFAULT_RATIO = 0.01           # bsc, mpq, topk2bit: a hundredth of the elements per hop
DEFAULT_WARMUP_ROUNDS = 0
DEFAULT_SIZE_THRESHOLD = 1 << 16    # mpq: keys under this many elements go as fp16
MAX_THRESHOLD = 1e30           # 2bit: still a finite float32
MAX_COUNT = 1 << 40            # the largest warmup_rounds or size_threshold taken
PARAMS = {                     # each type and the parameters it takes besides 'type'
    "none": (),
    "2bit": ("threshold", "scope"),
    "fp16": ("scope",),
    "bsc": ("ratio", "warmup_rounds", "momentum", "scope"),
    "mpq": ("ratio", "warmup_rounds", "size_threshold", "momentum", "scope"),
    "int8": ("scope",),
    "topk2bit": ("ratio", "warmup_rounds", "scope"),
}
TYPES = tuple(PARAMS)          # each has its codec in compression/registry.py (CODECS)
REFUSED = {                    # (type, parameter) -> why that type does not take it
    ("topk2bit", "momentum"): "SparseLoCo's error feedback (each hop's residual) takes the "
                              "place of momentum (DGC momentum correction: use 'bsc')",
}


class CompressionError(ValueError):
    """Compression parameters that cannot be used; the text names the field and why."""


@dataclass(frozen=True)
class CompressionConfig:
    """The cluster file's ``[compression]`` table: which codec (``type``, one of
    :data:`TYPES`; each takes the parameters :data:`PARAMS` lists) and where (``scope``:
    ``"wan"`` between DC servers, ``"all"`` also a worker's pushes). Checked on creation."""

    type: str = "none"
    threshold: float = DEFAULT_THRESHOLD
    ratio: float = DEFAULT_RATIO
    warmup_rounds: int = DEFAULT_WARMUP_ROUNDS
    size_threshold: int = DEFAULT_SIZE_THRESHOLD
    momentum: float = 0.0      # bsc / mpq: DGC momentum correction (0: off; others: refused)
    scope: str = "wan"

    def __post_init__(self):
        check_kind(self.type, TYPES, "compression type", CompressionError)
        if not (isinstance(self.threshold, (int, float)) and math.isfinite(self.threshold)
                and 0 < self.threshold <= MAX_THRESHOLD):
            raise CompressionError(f"threshold must be a positive number up to "
                                   f"{MAX_THRESHOLD:g}, got {self.threshold!r}")
        if not (isinstance(self.ratio, (int, float)) and 0 < self.ratio <= 1):
            raise CompressionError(f"ratio must be in (0, 1], got {self.ratio!r}")
        if not (isinstance(self.momentum, (int, float)) and not isinstance(self.momentum, bool)
                and 0 <= self.momentum < 1):
            raise CompressionError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if self.momentum and "momentum" not in PARAMS[self.type]:
            raise CompressionError(_refusal(self.type, "momentum"))
        for name in ("warmup_rounds", "size_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or \
                    not 0 <= value <= MAX_COUNT:
                raise CompressionError(f"{name} must be a whole number in 0..{MAX_COUNT}, "
                                       f"got {value!r}")
        if self.scope not in SCOPES:
            raise CompressionError(f"scope must be one of {SCOPES}, got {self.scope!r}")

    @property
    def on(self) -> bool:
        return self.type != "none"

    @classmethod
    def from_params(cls, params, where: str = "compression_params") -> "CompressionConfig":
        """From MXNet's dict (or None: no compression). Parameters a type does not take,
        or of the wrong type, are refused, never ignored."""
        if params is None:
            return cls()
        if not isinstance(params, dict):
            raise CompressionError(f"{where} must be a dict like {{'type': 'bsc', 'ratio': "
                                   f"0.01}}, got {type(params).__name__}")
        try:
            for kind, name in REFUSED:
                if params.get("type") == kind and name in params:
                    raise CompressionError(_refusal(kind, name))
            values = chosen_params(params, "type", "compression type", PARAMS, CompressionError)
        except CompressionError as exc:
            raise CompressionError(f"{where}: {exc}") from None
        kind = params["type"]
        for name in ("threshold", "momentum"):
            if isinstance(values.get(name), int) and not isinstance(values[name], bool):
                values[name] = float(values[name])
        try:
            return cls(type=kind, **values)
        except CompressionError as exc:
            raise CompressionError(f"{where}: {exc}") from None

    def to_params(self) -> dict:
        """The dict form, naming only what this type takes (inverse of :meth:`from_params`)."""
        return {"type": self.type, **{k: getattr(self, k) for k in PARAMS[self.type]}}

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "CompressionConfig":
        if not isinstance(data, dict) or set(data) - {f.name for f in fields(cls)}:
            raise CompressionError(f"malformed compression setting {data!r}")
        return cls(**data)

    def ratio_at(self, rnd: int) -> float:
        """The share of elements a bsc (mpq, topk2bit) hop sends in round ``rnd``
        (1-based): dense at the start of the warm-up, decaying geometrically to
        :attr:`ratio` at its end."""
        if self.warmup_rounds <= 0 or rnd > self.warmup_rounds:
            return self.ratio
        done = max(0, rnd - 1) / self.warmup_rounds
        return float(self.ratio ** done)


def _refusal(kind: str, name: str) -> str:
    """Why compression type ``kind`` does not take parameter ``name``."""
    why = REFUSED.get((kind, name))
    return (f"compression type {kind!r} takes no {name!r}: {why}" if why else
            f"compression type {kind!r} takes no {name!r} (it takes "
            f"{', '.join(map(repr, PARAMS[kind])) or 'nothing'})")
