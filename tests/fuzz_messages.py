"""Malformed and adversarial netstorm messages for the fuzz test (tests/cluster/test_fuzz.py).

:func:`generate` returns a few thousand multipart ZeroMQ messages (lists of ``bytes``
frames, as a DEALER sends them), each tagged with the category that made it, its kind and
a short note, so a failure can name what was sent. Pure and deterministic: no sockets and
no clock; the same seed gives the same messages byte for byte.

Node ids are those of a 2-DC x 1-worker pseudo cluster (the scheduler registers servers in
DC order, then workers): :data:`SCHEDULER` 0, servers 1 (dc0) and 2 (dc1), workers 3
(dc0, rank 0) and 4 (dc1, rank 1). Claimed senders also include ids that do not exist.

What is deliberately *not* generated: messages a correct node must obey when they come from
the node they claim (an ABORT with a string reason, a SHUTDOWN from the scheduler's id, a
BYE with a boolean ``clean``, a well-formed policy, a push or chunk of the round in play, a
reply to a request a worker is waiting for). Refusing those takes authentication (issue
11, parts 2 and 3: the foreign-peer tests), not decoding; see :func:`obeyed`. Therefore:
request ids are 0 or >= 2**32 (never one a worker waits for), the live key
:data:`LIVE_KEY` only ever gets garbage, and rounds of data messages are 0 or far ahead.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass

from netstorm.geoserver.core.wire import HEADER, MAGIC, NO_NODE, PROTOCOL_VERSION, Flag, Kind

SCHEDULER, SERVERS, WORKERS = 0, (1, 2), (3, 4)
DCS = ("dc0", "dc1")
LIVE_KEY = 0                       # the key the fuzz test's workers train
FAR = 1 << 40                      # rounds "far in the future" start here
FAR_KEY = 1 << 30                  # and keys (the header's key and version are 32-bit)
ODD_SENDERS = tuple(range(5, 11)) + (4242, NO_NODE)
F32 = 1                            # wire dtype codes
DTYPE_CODES = range(1, 8)
PLACEHOLDER = "\x00raw\x00"        # stands for a raw JSON fragment in a meta template

# Every meta field the code reads (grep 'meta.get(' and 'meta[' in geoserver/, scheduler/,
# kvstore/; tests/cluster/test_fuzz.py checks the list is complete) with its JSON type, and the kinds
# that carry it. Nested fields of a POLICY, a SET_OPTIMIZER spec and WELCOME follow below.
FIELD_TYPES = {
    "role": str, "dc": str, "address": str, "local_index": int, "pid": int, "host": str,
    "local_address": str,
    "nodes": list, "you": int, "settings": dict, "policy": dict, "round": int,
    "links": dict, "stalled": list, "reason": str, "clean": bool, "shape": list, "left": bool,
    "dtype": str, "origin": str, "spec": dict, "states": list, "counts": list,
    "num_update": int, "part": list, "from": str, "to": str, "kind": int, "hops": int,
    "relays": list, "rates": list, "probe_bytes": int, "timeout_s": float,
    "rank": int, "pushes": list, "who": str, "step_s": float, "steps": int, "stype": str,
    "node": dict, "pushed": list, "rejoined": bool, "base": int, "version": int, "keys": list,
    "opened": int, "states_digest": str, "shm_fd": int, "shared": bool, "items": list,
    "epoch": int, "cipher": str, "max_frame": int, "model_bytes": int,
    "quiet_s": float, "round_s": float, "waits": list, "missing": list,
    "mode": dict,
    "audit": list, "repair": bool,          # replica audit (docs/recovery.md)
    "change": str,                          # elastic: a DC joins or leaves
    "t": float, "rtt": float, "echo": float,    # heartbeats: clock, round trip (detect)
    "report": dict, "rebuilt": bool,
    "through": int, "weights": dict,
}
DC_FIELDS = {"dc", "origin", "from", "to", "root", "stalled"}   # strings naming a DC

# A well-formed meta per kind; each garbage message breaks one field of it.
BASE_META = {
    Kind.REGISTER: {"role": "worker", "dc": "dc0", "address": "tcp://127.0.0.1:9",
                    "local_index": 0, "pid": 1, "host": "fuzz", "local_address": ""},
    Kind.WELCOME: {"nodes": [], "you": 3, "settings": {}, "policy": None, "rejoined": False,
                   "rebuilt": False},
    Kind.HEARTBEAT: {"round": 0, "links": {}, "stalled": [], "step_s": 0.5,
                     # a key no script has: the live cluster's audits never compare it
                     "audit": [[987654, 1, "a" * 64, 1]]},
    Kind.ABORT: {"reason": "fuzz"},
    Kind.BYE: {"clean": True, "reason": "fuzz"},
    Kind.INIT: {"shape": [4], "dtype": "<f4", "origin": "dc1", "stype": "row_sparse",
                "shm_fd": 3},
    Kind.INIT_DONE: {"shared": True},
    Kind.SET_OPTIMIZER: {"spec": {"name": "sgd", "attrs": {}, "lr_mult": []}},
    Kind.STATES: {"states": [], "counts": [], "num_update": 0},
    Kind.LOAD_STATES: {"states": [], "counts": [], "num_update": 0},
    Kind.CHUNK_UP: {"part": [0, 4], "from": "dc1"},
    Kind.CHUNK_DOWN: {"part": [0, 4], "from": "dc1"},
    Kind.RELAY: {"part": [0, 4], "from": "dc1", "to": "dc0", "kind": int(Kind.CHUNK_UP),
                 "hops": 1},
    Kind.POLICY: {"policy": {"version": 1 << 30, "start_round": FAR,
                             "trees": [{"root": "dc0", "parent": {"dc0": None, "dc1": "dc0"}}],
                             "shares": [1.0]}},
    Kind.PROBE_REQUEST: {"probe_bytes": 1024, "timeout_s": 1.0},
    Kind.PROBE_REPORT: {"rates": {"dc1": 100.0}},
    Kind.ROUTES: {"relays": [], "rates": []},
    Kind.ERROR: {"reason": "fuzz"},
    Kind.VALUE: {"steps": 2},
    Kind.UPDATE: {"origin": "dc1"},
    Kind.WORKER_LEFT: {"rank": 1, "pushes": [[0, 1]], "who": "fuzz"},
    Kind.NODE_MOVED: {"node": {"id": 3, "role": "worker", "dc": "dc0",
                               "address": "tcp://127.0.0.1:9", "rank": 0, "local_rank": 0,
                               "host": "fuzz", "local_address": ""}},
    Kind.RESUMED: {"pushed": [[0, 1]], "base": 0},
    Kind.RECOVER: {"dc": "dc1", "version": 2},
    Kind.STATE_REPORT: {"keys": [[0, 3, "ab" * 32]]},
    Kind.REPLAY: {"policy": {"version": 2, "start_round": 4,
                             "trees": [{"root": "dc0", "parent": {"dc0": None, "dc1": "dc0"}}],
                             "shares": [1.0]}, "keys": [[0, 3, ["dc1"], "ab" * 32]], "opened": 3},
    Kind.STATE_REQUEST: {"keys": [0], "version": 2},
    Kind.LINK_KEY: {"epoch": 1, "cipher": "aegis256"},
    Kind.LINK_KEY_DONE: {"epoch": 1, "address": "tcp://127.0.0.1:9", "max_frame": 1 << 20},
    Kind.QUORUM_READY: {"through": 1},
    Kind.QUORUM: {"weights": {"dc0": 1, "dc1": 2}},
    Kind.STATE: {"keys": [[0, 3, [4], "<f4", False, "ab" * 32]], "spec": None,
                 "states": None, "version": 2, "mode": {"buffers": [], "digest": "ab" * 32}},
    # one PUSH of 4 float32 to an unknown key, far ahead (the base payload is its frame)
    Kind.BATCH: {"items": [[int(Kind.PUSH), FAR_KEY + 3, FAR, 0, 0, F32, 1, {}]]},
}
# nested fields worth breaking: where each sits in its kind's base meta, and its JSON type
NESTED_PATHS = {
    Kind.POLICY: [(("policy", "version"), int), (("policy", "start_round"), int),
                  (("policy", "trees"), list), (("policy", "shares"), list),
                  (("policy", "trees", 0, "root"), str), (("policy", "trees", 0, "parent"), dict)],
    Kind.SET_OPTIMIZER: [(("spec", "name"), str), (("spec", "attrs"), dict),
                         (("spec", "lr_mult"), list)],
    Kind.ROUTES: [(("relays", 0), list), (("rates", 0), list)],
    Kind.HEARTBEAT: [(("links", "dc1"), list), (("stalled", 0), str), (("audit", 0), list)],
    Kind.PROBE_REPORT: [(("rates", "dc1"), float)],
    Kind.RELAY: [(("part", 0), int), (("part", 1), int)],
}

# Who normally sends each kind (ids as above): garbage meta is claimed from them, where a
# field is actually read; other senders are covered by the "odd-sender" category.
NATURAL_SENDERS = {
    Kind.REGISTER: (NO_NODE, 3), Kind.WELCOME: (0,), Kind.BARRIER: (3, 4),
    Kind.BARRIER_DONE: (0,), Kind.HEARTBEAT: (1, 2, 3), Kind.ABORT: (0, 1, 3),
    Kind.BYE: (3, 4), Kind.SHUTDOWN: (1, 4242), Kind.INIT: (3, 2), Kind.INIT_DONE: (1,),
    Kind.PUSH: (3,), Kind.PULL: (3,), Kind.VALUE: (1,), Kind.SET_OPTIMIZER: (3,),
    Kind.OPTIMIZER_DONE: (1,), Kind.SAVE_STATES: (3,), Kind.STATES: (1,),
    Kind.LOAD_STATES: (3,), Kind.CHUNK_UP: (2,), Kind.CHUNK_DOWN: (2, 1), Kind.POLICY: (0,),
    Kind.PROBE_REQUEST: (0,), Kind.PROBE: (2,), Kind.PROBE_REPORT: (1, 2), Kind.RELAY: (2,),
    Kind.ROUTES: (0,), Kind.ROUND_OPEN: (0,), Kind.ERROR: (1, 0), Kind.WORKER_LEFT: (0,),
    Kind.UPDATE: (2,), Kind.NODE_MOVED: (0,), Kind.RESUME: (3,), Kind.RESUMED: (1,),
    Kind.RECOVER: (0,), Kind.STATE_REPORT: (1, 2), Kind.REPLAY: (0,), Kind.STATE_REQUEST: (2,),
    Kind.STATE: (2,), Kind.RECOVERED: (1, 2), Kind.BATCH: (3, 1), Kind.LINK_KEY: (2,),
    Kind.LINK_KEY_DONE: (2,), Kind.QUORUM_READY: (1, 2), Kind.QUORUM: (0,),
}
KINDS = {int(k) for k in Kind}
DATA_KINDS = (Kind.INIT, Kind.PUSH, Kind.VALUE, Kind.STATES, Kind.LOAD_STATES,
              Kind.CHUNK_UP, Kind.CHUNK_DOWN, Kind.PROBE, Kind.RELAY, Kind.UPDATE, Kind.STATE,
              Kind.BATCH, Kind.LINK_KEY)

# Raw JSON fragments no ``json.dumps`` of a sane value produces.
RAW = {
    "NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity", "1e999": "1e999",
    "int of 5000 digits": "9" * 5000, "int of 4301 digits": "1" + "0" * 4300,
    "list nested 900 deep": "[" * 900 + "]" * 900,
    "list nested 1000 deep": "[" * 1000 + "]" * 1000,
    "object nested 1000 deep": '{"a":' * 1000 + "1" + "}" * 1000,
    "lone surrogate": '"\\ud800"',
}
HUGE_RAW = {
    "list nested 100000 deep": "[" * 100000 + "]" * 100000,
    "string of 256 KiB": '"' + "x" * (256 << 10) + '"',
    "object of 20000 keys": "{" + ",".join(f'"k{i}":0' for i in range(20000)) + "}",
    "list of 100000 ints": "[" + ",".join(["0"] * 100000) + "]",
}


@dataclass(frozen=True)
class Fuzz:
    category: str
    kind: str           # the kind the header claims, or "-" when there is no header
    note: str
    frames: tuple       # bytes frames, as sent

    def describe(self) -> str:
        sizes = "+".join(str(len(f)) for f in self.frames)
        return f"[{self.category}] {self.kind}: {self.note} (frames of {sizes} bytes)"


def header(kind, sender=NO_NODE, key=0, seq=0, request=0, flags=0, dtype=0, tree=0,
           policy=0, chunk=0, magic=MAGIC, proto=PROTOCOL_VERSION) -> bytes:
    return HEADER.pack(magic, proto, int(kind), sender, int(flags), dtype, tree, policy, key,
                       chunk, seq, request)


def dumps(meta) -> bytes:
    return json.dumps(meta, separators=(",", ":"), allow_nan=True).encode()


def with_raw(meta, raw: str) -> bytes:
    """``meta`` encoded with its :data:`PLACEHOLDER` string replaced by raw JSON text."""
    return dumps(meta).replace(json.dumps(PLACEHOLDER).encode(), raw.encode())


def obeyed(kind: Kind, sender: int, meta) -> bool:
    """Would a node obey this message, authentication aside (a forged order, not garbage)?"""
    if not isinstance(meta, dict):
        return False
    if kind == Kind.ABORT:
        return isinstance(meta.get("reason", ""), str) and \
            isinstance(meta.get("left", False), bool)
    if kind == Kind.BYE:
        return sender in WORKERS and isinstance(meta.get("clean", True), bool)
    if kind == Kind.WORKER_LEFT:
        return sender == SCHEDULER and isinstance(meta.get("pushes"), list) and \
            isinstance(meta.get("who"), str)
    return kind == Kind.SHUTDOWN and sender == SCHEDULER


def wrong_values(field: str, expected: type) -> list:
    """JSON values of the wrong type for a field of type ``expected`` (and out-of-range ones:
    negative or 65-bit integers, strings naming no DC)."""
    pool = [None, True, False, -1, 1 << 64, 1.5, "", "x", [], [1, "a"], [[[]]], {},
            {"a": 1}]
    if expected is bool:
        return [v for v in pool if not isinstance(v, bool)]
    if expected is int:
        return [v for v in pool if not isinstance(v, int) or isinstance(v, bool) or v < 0
                or v >= 1 << 63]
    if expected is float:
        return [v for v in pool if not isinstance(v, (int, float)) or isinstance(v, bool)]
    if expected is str:
        return [v for v in pool if not isinstance(v, str)] + \
            (["", "x", "dc9"] if field in DC_FIELDS else [])
    return [v for v in pool if not isinstance(v, expected)]


def _set(meta, path, value):
    """A deep copy of ``meta`` with the value at ``path`` (keys and indices) replaced."""
    meta = json.loads(json.dumps(meta))
    node = meta
    for step in path[:-1]:
        node = node[step]
    if isinstance(node, list) and path[-1] >= len(node):
        node.append(value)
    else:
        node[path[-1]] = value
    return meta


class _Builder:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.out: list = []

    def far(self) -> int:
        """A round far in the future (or 0, which is never live either)."""
        return self.rng.choice([0, FAR + self.rng.randrange(1 << 20), (1 << 64) - 1])

    def request(self) -> int:
        return self.rng.choice([0, (1 << 32) + self.rng.randrange(1 << 30), (1 << 64) - 1])

    def add(self, category, kind, note, frames) -> None:
        """Keep the message unless it is a well-formed order (:func:`obeyed`)."""
        frames = tuple(bytes(f) for f in frames)
        if len(frames) >= 2 and len(frames[0]) == HEADER.size:
            fields = HEADER.unpack(frames[0])
            try:
                meta = json.loads(frames[1]) if frames[1] else {}
            except (ValueError, RecursionError):
                meta = None
            if fields[2] in KINDS and obeyed(Kind(fields[2]), fields[3], meta):
                return
        name = kind.name if isinstance(kind, Kind) else str(kind)
        self.out.append(Fuzz(category, name, note, frames))

    def message(self, category, kind, note, meta, sender, payload=(), **fields) -> None:
        """A valid header for ``kind`` from ``sender`` with meta ``meta`` (bytes, or an
        object to encode) and ``payload`` frames; header fields default to safe values."""
        defaults = dict(key=self.rng.choice([LIVE_KEY, FAR_KEY + self.rng.randrange(1 << 20)]),
                        seq=self.far(),
                        request=self.request(), dtype=F32 if payload else 0,
                        flags=Flag.HAS_VALUE if kind == Kind.INIT and payload else 0)
        defaults.update(fields)
        encoded = meta if isinstance(meta, bytes) else (dumps(meta) if meta else b"")
        self.add(category, kind, note, [header(kind, sender, **defaults), encoded, *payload])

    def payload(self, kind) -> list:
        """Frames a data kind plausibly carries: 4 float32 (the base metas' size)."""
        return [bytes(16)] if kind in DATA_KINDS else []

    # ------------------------------------------------------------ categories
    def random_bytes(self, n=150) -> None:
        for _ in range(n):
            frames = [self.rng.randbytes(self.rng.randrange(0, 300))
                      for _ in range(self.rng.randrange(1, 6))]
            self.add("random-bytes", "-", f"{len(frames)} random frames", frames)

    def frame_count(self) -> None:
        for kind in Kind:
            self.add("frame-count", kind, "header only, no meta frame", [header(kind, 3)])
        for n in (1, 2, 3):
            self.add("frame-count", "-", f"{n} empty frames", [b""] * n)
        self.add("frame-count", Kind.PUSH, "200 tensor frames",
                 [header(Kind.PUSH, 3, seq=FAR, dtype=F32), b""] + [bytes(4)] * 200)

    def header_size(self) -> None:
        for n in range(HEADER.size):
            kind = list(Kind)[n % len(Kind)]
            self.add("header-size", kind, f"header truncated to {n} bytes",
                     [header(kind, 3)[:n], b""])
        for extra in (1, 2, 7, 8, 64, 4096):
            kind = list(Kind)[extra % len(Kind)]
            self.add("header-size", kind, f"header with {extra} extra bytes",
                     [header(kind, 3) + self.rng.randbytes(extra), b""])

    def header_codes(self) -> None:
        for _ in range(20):
            magic = self.rng.randbytes(2)
            if magic != MAGIC:
                self.add("header-codes", Kind.PULL, f"magic {magic!r}",
                         [header(Kind.PULL, 3, magic=magic), b""])
        for proto in (0, 2, 3, 127, 255):
            self.add("header-codes", Kind.PULL, f"protocol {proto}",
                     [header(Kind.PULL, 3, proto=proto), b""])
        for code in range(256):
            if code not in KINDS:
                self.add("header-codes", code, f"unknown kind code {code}",
                         [header(code, self.rng.choice((0, 1, 2, 3))), b""])
        for code in (8, 9, 100, 255):
            for kind in (Kind.PUSH, Kind.CHUNK_UP, Kind.VALUE):
                self.add("header-codes", kind, f"unknown dtype code {code}",
                         [header(kind, NATURAL_SENDERS[kind][0], seq=FAR, dtype=code), b"",
                          bytes(16)])
        for kind in Kind:
            self.message("header-codes", kind, "every flag bit set", b"",
                         NATURAL_SENDERS[kind][0], flags=0xFFFF, tree=255, policy=0xFFFFFFFF,
                         chunk=0xFFFFFFFF)

    def meta_encoding(self) -> None:
        frames = {"invalid UTF-8": b'\xff\xfe{"a":1}', "invalid UTF-8 in a string":
                  b'{"reason":"\xc3\x28"}', "truncated JSON": b'{"round":', "single quotes":
                  b"{'round': 1}", "UTF-8 BOM": b"\xef\xbb\xbf{}", "NUL byte": b"\x00",
                  "JSON list": b"[]", "JSON number": b"1", "JSON string": b'"x"',
                  "JSON null": b"null", "JSON true": b"true", "bare NaN": b"NaN",
                  "two objects": b"{}{}", "whitespace": b"  \n "}
        for kind in Kind:
            for note, meta in frames.items():
                self.message("meta-encoding", kind, note, meta,
                             self.rng.choice(NATURAL_SENDERS[kind]),
                             payload=self.payload(kind))

    def meta_missing(self) -> None:
        for kind in Kind:
            for sender in NATURAL_SENDERS[kind]:
                self.message("meta-missing", kind, "no meta at all", {}, sender,
                             payload=self.payload(kind))
                self.message("meta-missing", kind, "only an unknown field", {"zz": 1},
                             sender, payload=self.payload(kind))
            for field in BASE_META.get(kind, {}):
                meta = dict(BASE_META[kind])
                del meta[field]
                self.message("meta-missing", kind, f"no {field!r}", meta,
                             NATURAL_SENDERS[kind][0], payload=self.payload(kind))

    def _paths(self, kind):
        """(path, expected type) of every field of ``kind`` worth breaking."""
        base = BASE_META.get(kind)
        if base is None:          # kinds without meta: the code must ignore any field
            return [((self.rng.choice(sorted(FIELD_TYPES)),), None)]
        return [((f,), FIELD_TYPES[f]) for f in base] + NESTED_PATHS.get(kind, [])

    def meta_types(self) -> None:
        for kind in Kind:
            base = BASE_META.get(kind, {})
            for path, expected in self._paths(kind):
                where = ".".join(map(str, path))
                name = path[-1] if isinstance(path[-1], str) else path[0]
                values = wrong_values(name, expected) if expected else \
                    [None, 1, "x", [], {"a": 1}]
                for value in values:
                    for sender in NATURAL_SENDERS[kind]:
                        self.message("meta-types", kind, f"{where} = {json.dumps(value)}",
                                     _set(base, path, value), sender,
                                     payload=self.payload(kind))

    def meta_raw(self) -> None:
        """NaN, Infinity, huge integers, deep nesting and lone surrogates in every field."""
        for kind in Kind:
            base = BASE_META.get(kind, {"zz": 0})
            for path, _ in self._paths(kind) if kind in BASE_META else [(("zz",), None)]:
                for note, raw in RAW.items():
                    meta = _set(base, path, PLACEHOLDER)
                    self.message("meta-raw", kind, f"{'.'.join(map(str, path))} = {note}",
                                 with_raw(meta, raw), self.rng.choice(NATURAL_SENDERS[kind]),
                                 payload=self.payload(kind))
            for note, raw in RAW.items():       # as the whole meta frame
                self.message("meta-raw", kind, f"meta frame = {note}", raw.encode(),
                             NATURAL_SENDERS[kind][0], payload=self.payload(kind))

    def meta_huge(self) -> None:
        for i, kind in enumerate(Kind):
            note, raw = list(HUGE_RAW.items())[i % len(HUGE_RAW)]
            base = BASE_META.get(kind, {"zz": 0})
            field = next(iter(base))
            value = raw if kind not in (Kind.ABORT, Kind.ERROR, Kind.BYE) or \
                not raw.startswith('"') else "[" + raw + "]"      # a list: never obeyed
            self.message("meta-huge", kind, f"{field} = {note}",
                         with_raw(_set(base, (field,), PLACEHOLDER), value),
                         NATURAL_SENDERS[kind][0], payload=self.payload(kind))
        self.message("meta-huge", Kind.HEARTBEAT, "meta frame = list nested 100000 deep",
                     HUGE_RAW["list nested 100000 deep"].encode(), 1)

    def tensor_frames(self) -> None:
        for kind in DATA_KINDS:
            sender = NATURAL_SENDERS[kind][0]
            meta = BASE_META.get(kind, {})
            cases = [("frames but no dtype", 0, [bytes(16)]),
                     ("7 bytes of float32", F32, [bytes(7)]),
                     ("no frame", F32, []), ("empty frame", F32, [b""]),
                     ("two frames", F32, [bytes(16), bytes(16)]),
                     ("frame of 1000 elements, meta says 4", F32, [bytes(4000)])]
            cases += [(f"dtype code {code}, 24 bytes", code, [bytes(24)])
                      for code in DTYPE_CODES]
            for note, code, frames in cases:
                self.message("tensor-frames", kind, note, meta, sender, payload=frames,
                             dtype=code)

    def plausible(self) -> None:
        """Headers and senders as the real nodes use them, with garbage in the data."""
        shapes = [[-1], [1 << 40, 1 << 40], [0], ["4"], [[4]], [4.5], [], [True],
                  [1 << 64], [2, -2]]
        dtypes = ["O", "<U8", "V3", "M8[ns]", "S0", "|b1", "complex64", "", "f4f4", "i",
                  "float128", "<f4,<f4", "(2,)f4", "np.float32", "object"]
        for sender in (3, 2):
            for key in (LIVE_KEY, FAR_KEY + 7):
                for shape in shapes:
                    self.message("plausible", Kind.INIT, f"key {key} shape {shape}",
                                 {"shape": shape, "dtype": "<f4", "origin": "dc1"}, sender,
                                 payload=[bytes(16)], key=key, seq=1)
                for dt in dtypes:
                    self.message("plausible", Kind.INIT, f"key {key} dtype {dt!r}",
                                 {"shape": [99] if key == LIVE_KEY else [4], "dtype": dt,
                                  "origin": "dc1"}, sender, payload=[bytes(16)], key=key,
                                 seq=1)
        for origin in ("dc9", ""):
            self.message("plausible", Kind.INIT, f"from dc1's server, origin {origin!r}",
                         {"shape": [4], "dtype": "<f4", "origin": origin}, 2,
                         payload=[bytes(16)], key=FAR_KEY + 8, seq=1)
        for kind in (Kind.PUSH, Kind.PULL):
            for seq in (0, FAR, (1 << 64) - 1):
                self.message("plausible", kind, f"key 0 round {seq}", {}, 3,
                             payload=[bytes(2112 * 4)] if kind == Kind.PUSH else [], seq=seq,
                             key=LIVE_KEY)
            self.message("plausible", kind, "unknown key", {}, 3,
                         payload=[bytes(16)] if kind == Kind.PUSH else [], key=FAR_KEY + 9,
                         seq=1)
        self.batches()
        parts = [[-1, 4], [0, 0], [0, 1 << 40], [3, 2], [4, 4], [0, 2], [2, 4], [0, 3.5],
                 ["0", 4], [0], [0, 4, 8]]
        for kind in (Kind.CHUNK_UP, Kind.CHUNK_DOWN, Kind.RELAY):
            base = BASE_META[kind]
            for part in parts:
                self.message("plausible", kind, f"part {part}", _set(base, ("part",), part),
                             2, payload=[bytes(16)], key=LIVE_KEY, seq=self.far(), policy=1)
            for tree in (1, 255):
                self.message("plausible", kind, f"tree {tree}", {}, 2, payload=[bytes(16)],
                             key=LIVE_KEY, seq=self.far(), policy=1, tree=tree)
        for origin, to, relay_kind, hops in (
                ("dc1", "dc0", 20, 1), ("dc0", "dc1", 21, 0), ("dc0", "dc1", 21, 1),
                ("dc1", "dc1", 20, 3), ("dc1", "dc1", 99, 1), ("dc1", "dc1", 20, -5),
                ("dc1", "dc1", 20, 1 << 62)):
            meta = {"part": [0, 4], "from": origin, "to": to, "kind": relay_kind, "hops": hops}
            self.message("plausible", Kind.RELAY, f"from {origin} to {to} kind {relay_kind} "
                         f"hops {hops}", meta, 2, payload=[bytes(16)], key=LIVE_KEY,
                         seq=self.far(), policy=1)
        for n in (0, 1, 4096):
            self.message("plausible", Kind.PROBE, f"probe of {n} bytes", {}, 2,
                         payload=[bytes(n)], dtype=6)
        self.message("plausible", Kind.PROBE_REQUEST, "probe of 0 bytes",
                     {"probe_bytes": 0, "timeout_s": 1.0}, 0)
        self.message("plausible", Kind.PROBE_REQUEST, "negative timeout",
                     {"probe_bytes": 1024, "timeout_s": -1.0}, 0)
        for rows in ([["dc0", "dc1", "dc9", 0.5]], [["dc0", "dc1", "dc1", 2]],
                     [["dc0", "dc1", "dc1", -1]], [[1, 2, 3, 4]], [["dc0"]]):
            self.message("plausible", Kind.ROUTES, f"relays {rows}", {"relays": rows}, 0)
        for rnd in (0, FAR, (1 << 64) - 1):
            self.message("plausible", Kind.ROUND_OPEN, f"round {rnd}", {}, 0, seq=rnd)
        trees = [[{"root": "dc0", "parent": {"dc0": None}}],
                 [{"root": "dc0", "parent": {"dc0": "dc1", "dc1": "dc0"}}],
                 [{"root": "dc9", "parent": {"dc9": None, "dc0": "dc9", "dc1": "dc9"}}],
                 [{"root": "dc0", "parent": {"dc0": None, "dc1": "dc0"},
                   "down": {"dc0": "dc1", "dc1": "dc0"}}],
                 [{"root": "dc0", "parent": {"dc0": None, "dc1": "dc0"}, "down": {"dc0": None}}],
                 [], [{"root": "dc0", "parent": {"dc0": None, "dc1": "dc0"}}] * 256]
        for tree in trees:
            policy = _set(BASE_META[Kind.POLICY], ("policy", "trees"), tree)
            self.message("plausible", Kind.POLICY, f"trees {json.dumps(tree)[:60]}", policy, 0)
        for shares in ([0.5], [2.0, -1.0], [float("nan")], []):
            policy = _set(BASE_META[Kind.POLICY], ("policy", "shares"), shares)
            self.message("plausible", Kind.POLICY, f"shares {shares}", policy, 0)

    def batches(self) -> None:
        """BATCHes (batch.py) as a worker or its server sends them, with garbage in the
        rows or in what they carry: each carried message is checked as if alone."""
        push, pull, value = int(Kind.PUSH), int(Kind.PULL), int(Kind.VALUE)
        cases = [  # (note, sender, rows, frames)
            ("a PUSH of the live key, round 0", 3, [[push, LIVE_KEY, 0, 0, 0, F32, 1, {}]],
             [bytes(2112 * 4)]),
            ("a PUSH of the live key, wrong size", 3,
             [[push, LIVE_KEY, FAR, 0, 1, F32, 1, {}]], [bytes(12)]),
            ("PULLs of unknown keys", 3,
             [[pull, FAR_KEY + k, 1, 0, 0, 0, 0, {}] for k in range(128)], []),
            ("129 PULLs", 3, [[pull, FAR_KEY, 1, 0, 0, 0, 0, {}]] * 129, []),
            ("a BATCH inside", 3, [[int(Kind.BATCH), 0, 0, 0, 0, 6, 0, {"items": []}]], []),
            ("an INIT inside", 3, [[int(Kind.INIT), FAR_KEY, 1, 0, 2, F32, 1,
                                    {"shape": [4], "dtype": "<f4"}]], [bytes(16)]),
            ("rows name 2 frames, 1 sent", 3, [[push, FAR_KEY, FAR, 0, 0, F32, 1, {}]] * 2,
             [bytes(16)]),
            ("rows name 1 frame, 2 sent", 3, [[push, FAR_KEY, FAR, 0, 0, F32, 1, {}]],
             [bytes(16)] * 2),
            ("a frame of 7 bytes of float32", 3, [[push, FAR_KEY, FAR, 0, 0, F32, 1, {}]],
             [bytes(7)]),
            ("a frame without a dtype", 3, [[push, FAR_KEY, FAR, 0, 0, 0, 1, {}]], [bytes(16)]),
            ("a SHARED PUSH with a frame", 3, [[push, FAR_KEY, FAR, 0, 16, F32, 1, {}]],
             [bytes(16)]),
            ("a PULL with a meta field", 3, [[pull, FAR_KEY, 1, 0, 0, 0, 0, {"steps": 2}]], []),
            ("a VALUE no one asked for", 1, [[value, LIVE_KEY, 1, 0, 0, F32, 1, {}]],
             [bytes(2112 * 4)]),
            ("a VALUE with steps 0", 1, [[value, FAR_KEY, 1, 0, 0, F32, 1, {"steps": 0}]],
             [bytes(16)]),
            ("a VALUE from a worker", 3, [[value, FAR_KEY, 1, 0, 0, F32, 1, {}]], [bytes(16)]),
            ("a PUSH from a server", 1, [[push, FAR_KEY, FAR, 0, 0, F32, 1, {}]], [bytes(16)]),
            ("no rows", 3, [], []),
            ("a row of 7", 3, [[pull, FAR_KEY, 1, 0, 0, 0, 0]], []),
        ]
        for note, sender, rows, frames in cases:
            self.message("plausible", Kind.BATCH, note, {"items": rows}, sender,
                         payload=frames, dtype=6)
        self.message("plausible", Kind.BATCH, "header dtype float32", BASE_META[Kind.BATCH],
                     3, payload=[bytes(16)], dtype=F32)

    def future(self) -> None:
        """Well-formed data that can only wait: rounds, versions and barriers that never
        come. What a node keeps of them must be bounded (about 6 MiB sent here)."""
        chunk = bytes(64 << 10)
        for i in range(48):
            self.message("future", Kind.CHUNK_UP, f"key 0 chunk {i}, round {FAR + i}", {}, 2,
                         payload=[chunk], key=LIVE_KEY, chunk=i, seq=FAR + i, policy=1)
        for i in range(48):
            self.message("future", Kind.CHUNK_UP, f"policy version {FAR + i}", {}, 2,
                         payload=[chunk], key=LIVE_KEY, chunk=i, seq=FAR, policy=(1 << 31) + i)
        for i in range(20):
            self.message("future", Kind.RELAY, f"part 0 of a 1M-element chunk, round {FAR + i}",
                         {"part": [0, 1 << 20], "from": "dc1", "to": "dc0",
                          "kind": int(Kind.CHUNK_UP), "hops": 1}, 2,
                         payload=[bytes(16)], dtype=3, key=LIVE_KEY, seq=FAR + i, policy=1)
        for i in range(50):
            self.message("future", Kind.PULL, f"key 0 after round {FAR + i}", {}, 3,
                         key=LIVE_KEY, seq=FAR + i)
            self.message("future", Kind.BARRIER, f"barrier {FAR + i}", {}, 3 + i % 2,
                         seq=FAR + i)

    def oversized(self) -> None:
        big = bytes(16 << 20)
        self.message("oversized", Kind.PUSH, "16 MiB frame from an unknown node", {}, 4242,
                     payload=[big], key=LIVE_KEY, seq=1)
        self.message("oversized", Kind.CHUNK_UP, "16 MiB chunk of a future round", {}, 2,
                     payload=[big], key=LIVE_KEY, seq=FAR, policy=1)
        self.message("oversized", Kind.HEARTBEAT, "16 MiB meta frame", b" " * (16 << 20), 1)

    def odd_senders(self, n=150) -> None:
        """Messages of the other categories claimed from ids that do not exist (5..10, 4242,
        NO_NODE), and from every real id."""
        pool = [m for m in self.out if m.category in ("meta-types", "plausible", "meta-raw")
                and len(m.frames[0]) == HEADER.size and sum(map(len, m.frames)) < 65536]
        for i, m in enumerate(self.rng.sample(pool, n)):
            sender = (ODD_SENDERS + (0, 1, 2, 3, 4))[i % (len(ODD_SENDERS) + 5)]
            head = bytearray(m.frames[0])
            head[4:6] = sender.to_bytes(2, "little")
            self.add("odd-sender", Kind(head[3]), f"sender {sender}: {m.note}",
                     [bytes(head), *m.frames[1:]])


CATEGORIES = ("random-bytes", "frame-count", "header-size", "header-codes", "meta-encoding",
              "meta-missing", "meta-types", "meta-raw", "meta-huge", "tensor-frames",
              "plausible", "future", "oversized", "odd-sender")


def generate(seed: int = 0) -> list:
    """Every fuzz message, grouped by category in :data:`CATEGORIES` order."""
    b = _Builder(seed)
    b.random_bytes()
    b.frame_count()
    b.header_size()
    b.header_codes()
    b.meta_encoding()
    b.meta_missing()
    b.meta_types()
    b.meta_raw()
    b.meta_huge()
    b.tensor_frames()
    b.plausible()
    b.future()
    b.oversized()
    b.odd_senders()
    return b.out
