"""Wire format: a small versioned binary header, a JSON meta frame, raw tensor frames.

A message on the wire is a ZeroMQ multipart message::

    frame 0   header   struct HEADER (38 bytes, little endian), see below
    frame 1   meta     UTF-8 JSON object, or empty (control data: addresses, specs)
    frame 2.. payload  raw tensor bytes in the dtype named by the header, sent zero-copy

Nothing received is ever unpickled: the header is unpacked with :mod:`struct`, the meta frame
is parsed as JSON and tensor frames are viewed with ``numpy.frombuffer``. :func:`decode`
raises :class:`WireError` with the reason for anything malformed; callers log and drop it.
The meta frame is bounded before it is parsed: at most :data:`MAX_META_BYTES`, nested at
most :data:`MAX_META_DEPTH` deep, integers of at most :data:`MAX_INT_DIGITS` digits, and no
NaN or infinity. What each kind may carry is :mod:`netstorm.geoserver.core.schema`'s business.
"""
from __future__ import annotations

import enum
import json
import math
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["DTYPES", "DTYPE_CODES", "Flag", "HEADER", "Kind", "MAGIC", "MAX_INT_DIGITS",
           "MAX_META_BYTES", "MAX_META_DEPTH", "Message", "NO_NODE", "PROTOCOL_VERSION",
           "WireError", "check_sizes", "claimed_sender", "decode", "dtype_code", "encode",
           "flags_of", "kind_of", "nesting", "parse_meta", "payload_bytes", "wire_size"]

MAGIC = b"NS"
PROTOCOL_VERSION = 1
# magic, protocol, kind, sender, flags, dtype, tree, policy, key, chunk, seq, request
HEADER = struct.Struct("<2sBBHHBBIIIQQ")
NO_NODE = 0xFFFF  # sender id before the scheduler assigned one


class Kind(enum.IntEnum):
    """What a message is. Control kinds carry meta only; data kinds carry tensor frames."""

    REGISTER = 1        # node -> scheduler: role, dc, address
    WELCOME = 2         # scheduler -> node: the node table, your id and ranks
    BARRIER = 3         # worker -> scheduler
    BARRIER_DONE = 4    # scheduler -> worker
    HEARTBEAT = 5       # node -> scheduler, and scheduler -> node: alive
    ABORT = 6           # scheduler -> all: a node died or misbehaved; reason in meta
    BYE = 7             # worker -> scheduler: finished cleanly
    SHUTDOWN = 8        # scheduler -> servers: all workers finished
    INIT = 10           # worker -> local server: declare a key (rank 0 carries the value)
    INIT_DONE = 11      # local server -> worker
    PUSH = 12           # worker -> local server: gradient of one key (one frame)
    PULL = 13           # worker -> local server: value of a key after round `seq`
    VALUE = 14          # local server -> worker: the value of one key (one frame)
    SET_OPTIMIZER = 15  # worker -> local server: JSON optimizer spec
    OPTIMIZER_DONE = 16
    SAVE_STATES = 17    # worker -> local server: request optimizer states
    STATES = 18         # local server -> worker: optimizer states (raw bytes frame)
    LOAD_STATES = 19    # worker -> local server: optimizer states to load
    CHUNK_UP = 20       # global server -> parent on a tree: partial sum of one chunk
    CHUNK_DOWN = 21     # global server -> child on a tree: the complete sum of one chunk
    POLICY = 22         # scheduler -> servers: a new policy version and its start round
    PROBE_REQUEST = 23  # scheduler -> servers: measure the links to every other DC now
    PROBE = 24          # server -> server: one piece of a measurement flow
    PROBE_REPORT = 25   # server -> scheduler: measured rate of every flow into this DC
    RELAY = 26          # server -> relay server: part of a chunk to forward (meta: to, from)
    ROUTES = 27         # scheduler -> servers: multipath relay plan and current link rates
    ROUND_OPEN = 28     # scheduler -> servers (adapt): round `seq` may start; its policy is final
    WORKER_LEFT = 29    # scheduler -> workers: a worker finished after round `rounds`
    ERROR = 30          # server -> worker: the request was rejected; reason in meta
    UPDATE = 31         # server -> server (sync mode mixed): a DC's sum of one key's round,
                        # passed on along a tree from its origin (meta: origin)
    NODE_MOVED = 32     # scheduler -> server: a worker of its DC rejoined (meta: its node)
    RESUME = 33         # rejoined worker -> local server: how far did I get?
    RESUMED = 34        # local server -> worker: rounds of each key it had pushed
    RECOVER = 35        # scheduler -> servers: a DC's server is replaced; freeze and report
    STATE_REPORT = 36   # server -> scheduler: each key's applied round and value digest
    REPLAY = 37         # scheduler -> servers: the round each key restarts from, whose
                        # replica to copy, and the replay policy
    STATE_REQUEST = 38  # server -> server: send me your replica of these keys
    STATE = 39          # server -> server: keys' values and optimizer states, with digests
    RECOVERED = 40      # server -> scheduler: every key at its planned round; replaying
    BATCH = 41          # several small PUSH, PULL or VALUE messages between a worker and
                        # its server, or CHUNK_UP/DOWN between servers, in one (batch.py);
                        # the receiving Van takes it apart
    LINK_KEY = 42       # server -> server, over CURVE: the key (one 32-byte frame) and epoch
                        # under which this server seals its bulk chunks to the receiver
                        # (core/bulk_channel.py)
    LINK_KEY_DONE = 43  # its answer: the key is installed; meta: the receiver's bulk address
    QUORUM_READY = 60   # server -> scheduler (quorum rounds): this DC offers its rounds up
                        # to meta `through` for WAN round `seq` (server/quorum_rounds.py)
    QUORUM = 61         # scheduler -> servers: WAN round `seq` completes with the DCs of
                        # meta weights {dc: worker-rounds} (scheduler/quorum.py)


class Flag(enum.IntFlag):
    NONE = 0
    WANT_VALUE = 1      # PUSH: reply with VALUE once the round is applied (pushpull)
    HAS_VALUE = 2       # INIT: frames carry the initial value
    QUEUED = 4          # server -> server: waited behind a busy link (passive measurement)
    ENCODED = 8         # chunk: the frame is a compressed payload (compression/payload.py)
    SHARED = 16         # PUSH, VALUE: no frame, the values are in the key's shared-memory
                        # slot (worker and server on one host: core/shared_memory.py)
    REPLY_SHARED = 32   # PULL, PUSH: answer into the key's shared value slot


DTYPES = {
    0: None,
    1: np.dtype(np.float32),
    2: np.dtype(np.float16),
    3: np.dtype(np.float64),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.uint8),
    7: np.dtype(np.int8),
}
DTYPE_CODES = {dt: code for code, dt in DTYPES.items() if dt is not None}
MAX_META_BYTES = 1 << 20       # the largest meta frame parsed (a WELCOME is a few KiB)
MAX_META_DEPTH = 32            # JSON nesting (optimizer states nest deepest, about 10)
MAX_INT_DIGITS = 40            # digits of a JSON integer (header fields fit in 20)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')     # a JSON string literal
_DEPTH_STEP = np.zeros(256, dtype=np.int32)
_DEPTH_STEP[[ord("["), ord("{")]] = 1
_DEPTH_STEP[[ord("]"), ord("}")]] = -1
_NESTING_BLOCK = 16 << 10


class WireError(ValueError):
    """A frame sequence that is not a valid message; the text says why."""


_KINDS = {int(k): k for k in Kind}
_FLAGS = {int(f): f for f in Flag}      # and every combination seen (at most 2**6)
_FLAG_BITS = sum(int(f) for f in Flag)


def kind_of(code: int) -> Kind:
    """The :class:`Kind` numbered ``code`` (:class:`WireError` if none). O(1), no enum call
    (a message's fields are read for every message received)."""
    kind = _KINDS.get(code)
    if kind is None:
        raise WireError(f"unknown message kind {code}")
    return kind


def flags_of(bits: int) -> Flag:
    """``bits`` as a :class:`Flag`, cached for the combinations of known flags. O(1)."""
    flags = _FLAGS.get(bits)
    if flags is None:
        flags = Flag(bits)
        if not bits & ~_FLAG_BITS:
            _FLAGS[bits] = flags
    return flags


def dtype_code(dtype) -> int:
    try:
        return DTYPE_CODES[np.dtype(dtype)]
    except (KeyError, TypeError) as exc:
        raise WireError(f"unsupported dtype {dtype!r}; supported: "
                        f"{sorted(str(d) for d in DTYPE_CODES)}") from exc


@dataclass
class Message:
    kind: Kind
    sender: int = NO_NODE
    key: int = 0
    chunk: int = 0
    seq: int = 0
    request: int = 0
    policy: int = 0         # policy version a WAN chunk belongs to
    tree: int = 0           # which of that policy's trees carries the chunk
    flags: Flag = Flag.NONE
    dtype: Any = None
    meta: dict = field(default_factory=dict)
    frames: Sequence = ()
    # set by the receiving Van, never sent: the principal whose key the sender proved
    # (a DC's name, or "" for the scheduler; None without CURVE). See security.py
    origin: str | None = None
    # set by the receiving Van on an INIT offering shared memory, never sent: the sending
    # process's id from the kernel's credentials of an ipc:// connection (0: not one)
    peer_pid: int = 0
    # set by the receiving Van, never sent: the bytes the message took on the wire when it
    # came in a BATCH (the first carried message counts the whole BATCH, the others 0);
    # None: its own frames (see wire_size)
    wire_bytes: int | None = None

    def arrays(self) -> list:
        """The payload frames viewed as 1-D numpy arrays of ``dtype`` (zero-copy, read-only)."""
        if self.dtype is None:
            raise WireError(f"{self.kind.name} message carries no dtype")
        return [np.frombuffer(f, dtype=self.dtype) for f in self.frames]


def payload_bytes(msg: Message) -> int:
    """The bytes of ``msg``'s tensor frames (numpy arrays or received buffers). O(frames)."""
    return sum(memoryview(f).nbytes for f in msg.frames)


def wire_size(msg: Message) -> int:
    """The bytes ``msg`` took on the wire (a BATCH's are counted on its first message)."""
    if msg.wire_bytes is not None:
        return msg.wire_bytes
    return HEADER.size + payload_bytes(msg)


def encode(msg: Message) -> list:
    """Frames for ``msg``; tensor frames are passed through untouched (zero-copy)."""
    code = 0 if msg.dtype is None else dtype_code(msg.dtype)
    header = HEADER.pack(MAGIC, PROTOCOL_VERSION, int(msg.kind), msg.sender, int(msg.flags),
                         code, msg.tree, msg.policy, msg.key, msg.chunk, msg.seq, msg.request)
    meta = json.dumps(msg.meta, separators=(",", ":")).encode() if msg.meta else b""
    return [header, meta, *msg.frames]


def check_sizes(kind: Kind, frames: Sequence, meta_limit: int, frame_limit: int) -> None:
    """Refuse before sending what no receiver takes: a meta frame over its kind's
    ``meta_limit`` (dropped there) or a frame over ``frame_limit``, a node's MAXMSGSIZE
    (ZeroMQ would drop the connection and what was queued behind it, silently).
    :class:`WireError` naming the limit. O(frames)."""
    if len(frames[1]) > meta_limit:
        raise WireError(f"{kind.name}: meta frame of {len(frames[1])} bytes exceeds this "
                        f"kind's limit of {meta_limit} bytes")
    for i, frame in enumerate(frames[2:], 2):
        size = memoryview(frame).nbytes
        if size > frame_limit:
            raise WireError(f"{kind.name}: frame {i} of {size} bytes exceeds MAX_FRAME_BYTES "
                            f"({frame_limit} bytes), the largest frame a node takes")


def _buffer(frame) -> memoryview:
    """A flat byte view of a received zmq.Frame (or any contiguous buffer, for tests)."""
    view = frame.buffer if hasattr(frame, "buffer") else memoryview(frame)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def nesting(text: str) -> int:
    """How deep the JSON ``text`` nests arrays and objects (brackets inside strings do not
    count), found without recursion, in blocks of :data:`_NESTING_BLOCK` bytes (so that a
    hostile 1 MiB meta needs no temporary arrays the allocator would keep). O(len(text))."""
    outside = _STRING.sub("", text).encode("utf-8", "replace")
    deepest = depth = 0
    for start in range(0, len(outside), _NESTING_BLOCK):
        block = np.frombuffer(outside, dtype=np.uint8, count=min(
            _NESTING_BLOCK, len(outside) - start), offset=start)
        levels = np.cumsum(_DEPTH_STEP[block], dtype=np.int32)
        deepest = max(deepest, depth + int(levels.max()))
        depth += int(levels[-1])
    return deepest


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise WireError(f"integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise WireError(f"number {text[:40]} is not finite")
    return value


def _constant(text: str):
    raise WireError(f"{text} is not a number JSON allows")


def parse_meta(raw: bytes) -> dict:
    """The meta frame's JSON object, within the limits above; :class:`WireError` else."""
    if len(raw) > MAX_META_BYTES:
        raise WireError(f"meta frame of {len(raw)} bytes exceeds {MAX_META_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(f"meta frame is not JSON: {exc}") from exc
    depth = 0 if text.count("[") + text.count("{") <= MAX_META_DEPTH else nesting(text)
    if depth > MAX_META_DEPTH:
        raise WireError(f"meta frame nests {depth} deep (at most {MAX_META_DEPTH})")
    try:
        meta = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except WireError:
        raise
    except (ValueError, RecursionError) as exc:
        raise WireError(f"meta frame is not JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise WireError("meta frame is not a JSON object")
    return meta


def claimed_sender(frames: Sequence):
    """The sender id a message's header claims (None when there is no header to read)."""
    if not frames:
        return None
    header = _buffer(frames[0])
    return HEADER.unpack(header)[3] if len(header) == HEADER.size else None


def decode(frames: Sequence, meta_limits: Mapping | None = None) -> Message:
    """Parse a received multipart message; raise :class:`WireError` saying what is wrong.
    ``meta_limits`` maps a kind to the largest meta frame it may have (checked before
    parsing; :data:`MAX_META_BYTES` for kinds it does not name)."""
    if len(frames) < 2:
        raise WireError(f"expected at least 2 frames (header, meta), got {len(frames)}")
    header = _buffer(frames[0])
    if len(header) != HEADER.size:
        raise WireError(f"header is {len(header)} bytes, expected {HEADER.size}")
    (magic, proto, kind, sender, flags, code, tree, policy, key, chunk, seq,
     request) = HEADER.unpack(header)
    if magic != MAGIC:
        raise WireError(f"bad magic {bytes(magic)!r}")
    if proto != PROTOCOL_VERSION:
        raise WireError(f"protocol version {proto}, this node speaks {PROTOCOL_VERSION}")
    kind = kind_of(kind)
    if code not in DTYPES:
        raise WireError(f"unknown dtype code {code}")
    dtype = DTYPES[code]
    meta_buf = _buffer(frames[1])
    limit = MAX_META_BYTES if meta_limits is None else meta_limits.get(kind, MAX_META_BYTES)
    if len(meta_buf) > limit:     # before any copy
        raise WireError(f"{kind.name} meta frame of {len(meta_buf)} bytes exceeds {limit}")
    meta = parse_meta(bytes(meta_buf)) if len(meta_buf) else {}
    payload = [_buffer(f) for f in frames[2:]]
    if payload and dtype is None:
        raise WireError(f"{kind.name} has {len(payload)} tensor frames but no dtype")
    if dtype is not None:
        for i, buf in enumerate(payload):
            if len(buf) % dtype.itemsize:
                raise WireError(f"frame {i + 2} has {len(buf)} bytes, not a multiple of "
                                f"{dtype} itemsize {dtype.itemsize}")
    return Message(kind=kind, sender=sender, key=key, chunk=chunk, seq=seq, request=request,
                   policy=policy, tree=tree, flags=flags_of(flags), dtype=dtype, meta=meta,
                   frames=payload)
