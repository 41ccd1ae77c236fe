"""What a message kind may carry: the vocabulary of meta fields, frames and dtypes.

In the spirit of ps-lite's ``meta.proto``: a :class:`MessageSchema` declares the meta fields
a kind may carry (anything else is rejected), which are required, their types
(str/int/float/bool, lists and objects of those) and ranges, how many tensor frames it has,
whether a dtype is required or forbidden, and the constraints between header and frames (an
INIT's shape against its value's size, an optimizer state's frame references: the
``check_*`` functions). Each kind's schema is its row of :mod:`.kinds`, with the parts
shared by several kinds here. :func:`check` checks one decoded message against a schema and
raises :class:`SchemaError` (a :class:`~netstorm.geoserver.core.wire.WireError`) naming the kind
and the field; the Van calls it (through :func:`.kinds.validate`) on every message it
receives, so handlers can trust the types. Pure. Numbers in meta are already finite and
integers short (:func:`wire.parse_meta`).
"""
from __future__ import annotations

import math

import numpy as np

from ..config.settings import MAX_FRAME_BYTES, SettingsError
from .wire import DTYPE_CODES, Flag, Kind, Message, WireError

__all__ = ["AnyObj", "Bool", "CHUNK_META", "DATA", "DIGEST", "Decoded", "DictOf", "EMPTY", "I64",
           "Int", "KEY_DTYPES", "KEY_STATE", "ListOf", "MAX_BATCH_MESSAGES", "MAX_DIMS",
           "MAX_WAITS", "MessageSchema", "NODE", "Nullable", "Num", "OPTIMIZER_SPEC", "Obj",
           "POLICY", "PUSHED", "PUSHES", "Plain", "REASON", "RELAY_META", "Row",
           "SMALL_META_BYTES", "STATES", "SchemaError", "Spec", "Str", "U16", "U32", "U64", "check",
           "check_batch", "check_init", "check_replica", "check_states", "not_shared_and_encoded"]

U16, U32, I64 = (1 << 16) - 1, (1 << 32) - 1, (1 << 63) - 1
U64 = (1 << 64) - 1             # a header's seq and request (wire.HEADER)
MAX_DIMS = 32                   # numpy's own limit on array dimensions
SMALL_META_BYTES = 16 << 10     # kinds whose meta is a few fixed fields
KEY_DTYPES = {dt.str for dt in DTYPE_CODES} | {dt.name for dt in DTYPE_CODES}
MAX_BATCH_MESSAGES = 128       # messages a BATCH carries at most (batch.py): its meta stays small


class SchemaError(WireError):
    """A decoded message its kind's schema does not allow; the text names the field."""


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Spec:
    """A type with its range; :meth:`check` raises :class:`SchemaError` about ``where``."""

    def check(self, value, where: str) -> None:
        raise NotImplementedError

    def fail(self, where: str, expected: str, value) -> None:
        raise SchemaError(f"{where} must be {expected}, got {_show(value)}")

    def sized(self, value, where: str, kind: type, noun: str, max_len, unit: str) -> None:
        """``value`` is a ``kind`` of at most ``max_len`` ``unit`` (None: any length)."""
        if not isinstance(value, kind):
            self.fail(where, noun, value)
        if max_len is not None and len(value) > max_len:
            self.fail(where, f"{noun} of at most {max_len} {unit}", value)


class Int(Spec):
    def __init__(self, lo: int = 0, hi: int = I64, choices=None):
        self.lo, self.hi, self.choices = lo, hi, choices

    def check(self, value, where):
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, "an integer", value)
        if self.choices is not None and value not in self.choices:
            self.fail(where, f"one of {sorted(self.choices)}", value)
        if not self.lo <= value <= self.hi:
            self.fail(where, f"an integer in [{self.lo}, {self.hi}]", value)


class Num(Spec):
    def __init__(self, lo=None, hi=None):
        self.lo, self.hi = lo, hi

    def check(self, value, where):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value):
            self.fail(where, "a finite number", value)
        if self.lo is not None and value < self.lo or self.hi is not None and value > self.hi:
            self.fail(where, f"a number in [{self.lo}, {self.hi}]", value)


class Bool(Spec):
    def check(self, value, where):
        if not isinstance(value, bool):
            self.fail(where, "true or false", value)


class Str(Spec):
    def __init__(self, max_len: int | None = 1024, choices=None):
        self.max_len, self.choices = max_len, choices

    def check(self, value, where):
        self.sized(value, where, str, "a string", self.max_len, "characters")
        if self.choices is not None and value not in self.choices:
            self.fail(where, f"one of {sorted(self.choices)}", value)


class Nullable(Spec):
    def __init__(self, spec: Spec):
        self.spec = spec

    def check(self, value, where):
        if value is not None:
            self.spec.check(value, where)


class ListOf(Spec):
    def __init__(self, item: Spec, max_len: int | None = None):
        self.item, self.max_len = item, max_len

    def check(self, value, where):
        self.sized(value, where, list, "a list", self.max_len, "items")
        for i, item in enumerate(value):
            self.item.check(item, f"{where}[{i}]")


class Row(Spec):
    """A list of fixed length, one spec per position (JSON's tuple)."""

    def __init__(self, *items: Spec):
        self.items = items

    def check(self, value, where):
        if not isinstance(value, list) or len(value) != len(self.items):
            self.fail(where, f"a list of {len(self.items)} items", value)
        for i, (spec, item) in enumerate(zip(self.items, value)):
            spec.check(item, f"{where}[{i}]")


class DictOf(Spec):
    """An object with any string keys, every value of one spec."""

    def __init__(self, value: Spec, key: Spec = Str()):
        self.value, self.key = value, key

    def check(self, value, where):
        if not isinstance(value, dict):
            self.fail(where, "an object", value)
        for k, v in value.items():
            self.key.check(k, f"a key of {where}")
            self.value.check(v, f"{where}[{k[:40]!r}]")


class Obj(Spec):
    """An object with declared fields only; ``required`` names those it must have."""

    def __init__(self, fields: dict, required=()):
        self.fields, self.required = fields, tuple(required)

    def check(self, value, where):
        if not isinstance(value, dict):
            self.fail(where, "an object", value)
        for name in self.required:
            if name not in value:
                raise SchemaError(f"{where} lacks required field {name!r}")
        for name, item in value.items():
            spec = self.fields.get(name)
            if spec is None:
                raise SchemaError(f"{where} has unknown field {name[:40]!r}")
            spec.check(item, f"{where}.{name}")


class Plain(Spec):
    """An optimizer attribute: null, bool, string, finite number, or a list of those."""

    def check(self, value, where):
        if value is None or isinstance(value, (bool, str)):
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                self.check(item, f"{where}[{i}]")
            return
        Num(-I64, I64).check(value, where)


class AnyObj(Spec):
    """An object whose fields a message-level check examines (an optimizer state node)."""

    def check(self, value, where):
        if not isinstance(value, dict):
            self.fail(where, "an object", value)


class Decoded(Spec):
    """A value a typed decoder validates (``decode`` raises :class:`SettingsError`)."""

    def __init__(self, decode):
        self.decode = decode

    def check(self, value, where):
        try:
            self.decode(value)
        except SettingsError as exc:
            raise SchemaError(f"{where}: {exc}") from None


class MessageSchema:
    """One kind: its meta, ``frames`` (least, most), ``dtype`` rule ('required',
    'forbidden' or 'optional'), ``flags`` it may carry, an extra ``check(msg)``, and
    the largest meta frame it may have (checked before the meta is parsed: a kind whose
    meta does not grow with the cluster or the model never needs more than
    :data:`SMALL_META_BYTES`)."""

    def __init__(self, meta: Spec = Obj({}), frames=(0, 0), dtype: str = "forbidden",
                 flags: Flag = Flag.NONE, check=None, max_meta_bytes: int = SMALL_META_BYTES):
        self.meta, self.frames, self.dtype = meta, frames, dtype
        self.flags, self.extra = flags, check
        self.max_meta_bytes = max_meta_bytes


# ---------------------------------------------------------------- shared parts
POLICY = Obj({"version": Int(0, U32), "start_round": Int(),
              "trees": ListOf(Obj({"root": Str(), "parent": DictOf(Nullable(Str())),
                                   "down": DictOf(Nullable(Str()))},
                                  required=("root", "parent")), max_len=255),
              "shares": ListOf(Num(0.0, 1.0), max_len=255)},
             required=("version", "start_round", "trees"))
NODE = Obj({"id": Int(0, U16), "role": Str(64), "dc": Str(), "address": Str(),
            "rank": Int(-1, U32), "local_rank": Int(-1, U32), "host": Str(),
            "local_address": Str()},
           required=("id", "role", "dc", "address", "rank", "local_rank"))
MULTS = ListOf(Row(Int(0, I64), Num()))
PUSHES = ListOf(Row(Int(0, U32), Int(0, U32)))     # [[key, rounds pushed], ...]
PUSHED = ListOf(Row(Int(0, U32), ListOf(Int(0, I64))))    # [[rounds pushed, [keys]], ...]
MAX_WAITS = 8       # the rounds a worker's heartbeat says it waits for (worker/progress.py)
OPTIMIZER_SPEC = Obj({"name": Str(64), "attrs": DictOf(Plain()), "lr_mult": MULTS,
                      "wd_mult": MULTS, "named_lr_mult": DictOf(Num()),
                      "named_wd_mult": DictOf(Num()),
                      "idx2name": ListOf(Row(Int(0, I64), Str())),
                      "lr_scheduler": Nullable(Obj({"name": Str(64), "attrs": DictOf(Plain())},
                                                   required=("name", "attrs")))},
                     required=("name", "attrs", "lr_mult", "wd_mult", "named_lr_mult",
                               "named_wd_mult", "idx2name", "lr_scheduler"))
STATES = Obj({"states": ListOf(Row(Int(0, I64), Nullable(AnyObj()))),
              "counts": ListOf(Row(Int(0, I64), Int())), "num_update": Int()},
             required=("states", "counts", "num_update"))
PART = Row(Int(0, U32), Int(1, U32))        # [first element, elements in the whole chunk]
CHUNK_META = Obj({"part": PART, "from": Str()})
RELAY_META = Obj({"part": PART, "from": Str(), "to": Str(),
                  "kind": Int(choices={int(Kind.CHUNK_UP), int(Kind.CHUNK_DOWN)}),
                  "hops": Int(0, 255)}, required=("part", "from", "to", "kind", "hops"))
REASON = Obj({"reason": Str(None)})


def check_init(msg: Message) -> None:
    """An INIT's shape and dtype against its header and (with a value) its one frame."""
    shape, dtype = msg.meta["shape"], np.dtype(msg.meta["dtype"])
    if msg.dtype is not None and msg.dtype != dtype:
        raise SchemaError(f"INIT: header dtype {msg.dtype} differs from meta.dtype {dtype}")
    size = math.prod(shape)
    if size * dtype.itemsize > MAX_FRAME_BYTES:
        raise SchemaError(f"INIT: meta.shape {_show(shape)} exceeds the largest frame "
                          f"({MAX_FRAME_BYTES} bytes)")
    value = bool(msg.flags & Flag.HAS_VALUE)
    if len(msg.frames) != int(value):
        raise SchemaError(f"INIT: {len(msg.frames)} frames, "
                          f"{'one' if value else 'none'} expected with "
                          f"HAS_VALUE {'set' if value else 'unset'}")
    if value and len(msg.frames[0]) != size * dtype.itemsize:
        raise SchemaError(f"INIT: frame of {len(msg.frames[0])} bytes, meta.shape "
                          f"{_show(shape)} of {dtype} needs {size * dtype.itemsize}")


def not_shared_and_encoded(msg: Message) -> None:
    """A push in shared memory (:mod:`netstorm.geoserver.core.shared_memory`) is never
    compressed."""
    if msg.flags & Flag.SHARED and msg.flags & Flag.ENCODED:
        raise SchemaError("SHARED and ENCODED together")


def _state(node, where: str, frames) -> None:
    """One optimizer state: null, ``{"seq": [...]}``, ``{"num": x}`` or a frame reference."""
    if node is None:
        return
    if set(node) == {"seq"}:
        ListOf(Nullable(AnyObj())).check(node["seq"], f"{where}.seq")
        for i, item in enumerate(node["seq"]):
            _state(item, f"{where}.seq[{i}]", frames)
        return
    if set(node) == {"num"}:
        Plain().check(node["num"], f"{where}.num")
        return
    Obj({"frame": Int(0, max(0, len(frames) - 1)), "shape": ListOf(Int(), MAX_DIMS),
         "dtype": Str(16, {dt.name for dt in DTYPE_CODES})},
        required=("frame", "shape", "dtype")).check(node, where)
    need = math.prod(node["shape"]) * np.dtype(node["dtype"]).itemsize
    if not frames or len(frames[node["frame"]]) != need:
        raise SchemaError(f"{where}: frame {node['frame']} does not hold {need} bytes")


def check_states(msg: Message) -> None:
    for i, (_, node) in enumerate(msg.meta["states"]):
        _state(node, f"meta.states[{i}][1]", msg.frames)


DIGEST = Str(64)            # SHA-256, hex
KEY_STATE = Row(Int(0, I64), Int(0, U32), ListOf(Int(), MAX_DIMS), Str(16, KEY_DTYPES), Bool(),
                DIGEST)      # [key, round, shape, dtype, row_sparse, digest of its value]


def check_replica(msg: Message) -> None:
    """A STATE: one frame per key holding its value, then the optimizer states' frames."""
    keys = msg.meta["keys"]
    if len(msg.frames) < len(keys):
        raise SchemaError(f"STATE: {len(keys)} keys but {len(msg.frames)} frames")
    for i, (key, _, shape, dtype, _, _) in enumerate(keys):
        need = math.prod(shape) * np.dtype(dtype).itemsize
        if len(msg.frames[i]) != need:
            raise SchemaError(f"STATE: key {key}: frame of {len(msg.frames[i])} bytes, its "
                              f"shape {_show(shape)} of {dtype} needs {need}")
    states = msg.meta.get("states")
    for i, (_, node) in enumerate(states["states"] if states else ()):
        _state(node, f"meta.states.states[{i}][1]", msg.frames[len(keys):])


def check_batch(msg: Message) -> None:
    """A BATCH's rows name one to :data:`MAX_BATCH_MESSAGES` messages, its header uint8."""
    if not msg.meta["items"]:
        raise SchemaError("BATCH: meta.items is empty")
    if msg.dtype != np.uint8:
        raise SchemaError(f"BATCH: header dtype {msg.dtype}, expected uint8")


def check_link_key(msg: Message) -> None:
    """A LINK_KEY carries one uint8 frame of exactly 32 bytes (an AEGIS-256 key)."""
    if msg.dtype != np.uint8 or len(msg.frames[0]) != 32:
        raise SchemaError(f"LINK_KEY: the key frame is {len(msg.frames[0])} bytes of "
                          f"{msg.dtype}, expected 32 bytes of uint8")


EMPTY = MessageSchema()
DATA = MessageSchema(frames=(1, 1), dtype="required", flags=Flag.QUEUED)


def check(schema: MessageSchema, msg: Message) -> Message:
    """``msg`` if ``schema`` (its kind's, :func:`netstorm.geoserver.core.kinds.validate`)
    allows it; else :class:`SchemaError` saying why."""
    name = msg.kind.name
    extra = int(msg.flags) & ~int(schema.flags)
    if extra:
        raise SchemaError(f"{name}: flags {extra:#x} not allowed on this kind")
    least, most = (0, 0) if msg.flags & Flag.SHARED else schema.frames  # core/shared_memory.py
    if len(msg.frames) < least or most is not None and len(msg.frames) > most:
        raise SchemaError(f"{name}: {len(msg.frames)} tensor frames, expected "
                          f"{least if least == most else f'{least} to {most}'}")
    if schema.dtype == "required" and msg.dtype is None:
        raise SchemaError(f"{name}: the header names no dtype")
    if schema.dtype == "forbidden" and msg.dtype is not None:
        raise SchemaError(f"{name}: the header names dtype {msg.dtype}; this kind has none")
    try:
        schema.meta.check(msg.meta, "meta")
        if schema.extra is not None:
            schema.extra(msg)
    except SchemaError as exc:
        raise SchemaError(f"{name}: {exc}") from None
    return msg
