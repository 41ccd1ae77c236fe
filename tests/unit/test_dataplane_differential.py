"""The compiled data plane's recogniser (geoserver/native/recognise.cpp) against the Python
path it short-cuts: whatever ``_dataplane.recognise`` takes as "a whole dense chunk from
another DC's server" the Python path must take too, with equal fields.

The Python path is built from the real functions the server runs on a message the core
hands over (``Van.accept_raw`` -> ``wire.decode`` + ``kinds.validate``, the origin from the
connection's User-Id, ``Postoffice.admit`` -> ``roles.refusal``, ``GeoServer._handle`` ->
``_on_chunk`` -> ``WanTransport.on_message``). Messages: the fuzz corpus of
tests/fuzz_messages.py and thousands of seeded random mutations of valid chunk messages.
The converse is not required (the core may leave a valid message to Python), but plain
valid chunks must take the fast path: it is not empty.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass

import numpy as np
import pytest

from netstorm.geoserver.core import kinds, roles, security, wire
from netstorm.geoserver.core.nodes import SCHEDULER, SERVER, WORKER, NodeInfo, NodeTable
from netstorm.geoserver.core.wire import HEADER, MAGIC, NO_NODE, PROTOCOL_VERSION, Flag, Kind

import fuzz_messages        # tests/fuzz_messages.py, a plain module of the suite

dataplane = pytest.importorskip("netstorm.geoserver._dataplane")

# The cluster: ids of tests/fuzz_messages.py (scheduler 0, servers 1 and 2 of dc0 and dc1,
# workers 3 and 4) and a third DC whose ids the corpus does not use (its 5..10 stay unknown).
DCS = ("dc0", "dc1", "dc2")
TABLE = NodeTable([
    NodeInfo(0, SCHEDULER, "", "tcp://s:1"),
    NodeInfo(1, SERVER, "dc0", "tcp://a:1"), NodeInfo(2, SERVER, "dc1", "tcp://b:1"),
    NodeInfo(3, WORKER, "dc0", "tcp://a:2", rank=0, local_rank=0),
    NodeInfo(4, WORKER, "dc1", "tcp://b:2", rank=1, local_rank=0),
    NodeInfo(11, SERVER, "dc2", "tcp://c:1"),
    NodeInfo(12, WORKER, "dc2", "tcp://c:2", rank=2, local_rank=0),
])
SERVERS = {dc: TABLE.server_of(dc).id for dc in DCS}          # dc -> server node id
INDEX = {dc: i for i, dc in enumerate(DCS)}
# as geoserver/server/native_plane.py builds them for the core
PRINCIPALS = {security.user_id(dc).decode(): INDEX[dc] for dc in DCS}
MAX_CHUNK = 4096              # the core's max_chunk_bytes here (settings.chunk_bytes)
ITEMSIZE = {code: dt.itemsize for code, dt in wire.DTYPES.items() if dt is not None}
FIELDS = ("kind", "sender", "flags", "dtype", "tree", "policy", "key", "chunk", "seq",
          "request")
SCHED_USER = security.user_id("").decode()       # the scheduler's key ("" is its principal)
SEED = 36


def core_verdict(frames, user, me: str, curve: bool, max_chunk: int = MAX_CHUNK):
    """The fast path's verdict for server ``me`` (a dict of fields, or None)."""
    servers = {SERVERS[dc]: INDEX[dc] for dc in DCS if dc != me}
    return dataplane.recognise(list(frames), user, INDEX[me], servers, PRINCIPALS, curve,
                               max_chunk)


@dataclass
class Delivered:
    """What the Python path made of a message the server's WAN transport delivers whole."""

    msg: wire.Message
    source: str             # the DC the chunk came from (GeoServer.dc_of_server)


def python_path(frames, user, me: str, curve: bool):
    """The Python path on server ``me``: a :class:`Delivered` if it delivers the message as a
    whole chunk, else the reason it does not (a string)."""
    try:
        msg = kinds.validate(wire.decode(list(frames), kinds.META_LIMITS))
    except wire.WireError as exc:       # SchemaError is one
        return f"malformed: {exc}"
    if curve:       # Van._origin on a TCP connection (no ipc:// peer without a User-Id)
        if user is None:
            return "no authenticated key"
        msg.origin = security.principal_of(user)
        if msg.origin is None:
            return "a User-Id this node's ZAP handler did not set"
    if msg.kind == Kind.BATCH:
        return "a BATCH (taken apart by the Van: never one chunk)"
    why = roles.refusal(TABLE, TABLE.server_of(me), msg)
    if why:
        return f"refused: {why}"
    if kinds.KINDS[msg.kind].handlers.get(SERVER) != "_on_chunk" or msg.kind == Kind.RELAY:
        return f"{msg.kind.name} is not handled as a chunk from a neighbour"
    # WanTransport.on_message: one frame with a dtype, delivered whole unless a part
    if len(msg.frames) != 1 or msg.dtype is None:
        return "dropped by the WAN transport"
    if "part" in msg.meta:
        return "a part, reassembled first"
    return Delivered(msg, TABLE[msg.sender].dc)


def check_agreement(frames, user, me: str, curve: bool, what: str,
                    max_chunk: int = MAX_CHUNK) -> tuple:
    """Assert the contract on one message; ``(core accepted, Python delivered)``."""
    fast = core_verdict(frames, user, me, curve, max_chunk)
    slow = python_path(frames, user, me, curve)
    if fast is None:
        return False, isinstance(slow, Delivered)
    context = f"{what} (user {user!r}, at {me}, curve {curve}): core took {fast}"
    assert isinstance(slow, Delivered), f"{context}, Python did not: {slow}"
    msg = slow.msg
    python_fields = dict(kind=int(msg.kind), sender=msg.sender, flags=int(msg.flags),
                         dtype=wire.DTYPE_CODES[msg.dtype], tree=msg.tree, policy=msg.policy,
                         key=msg.key, chunk=msg.chunk, seq=msg.seq, request=msg.request)
    assert {f: fast[f] for f in FIELDS} == python_fields, context
    assert DCS[fast["source"]] == slow.source != me, context
    assert fast["payload_bytes"] == wire.payload_bytes(msg) == len(frames[2]), context
    assert not msg.flags & Flag.ENCODED and msg.kind in (Kind.CHUNK_UP, Kind.CHUNK_DOWN), \
        f"{context}: not a dense chunk"
    (array,) = msg.arrays()
    assert array.nbytes == fast["payload_bytes"] > 0, context
    return True, True


# ---------------------------------------------------------------- messages

def header(kind=Kind.CHUNK_UP, sender=2, flags=0, dtype=1, tree=0, policy=0, key=0, chunk=0,
           seq=0, request=0, magic=MAGIC, proto=PROTOCOL_VERSION) -> bytes:
    return HEADER.pack(magic, proto, int(kind), sender, int(flags), dtype, tree, policy, key,
                       chunk, seq, request)


@dataclass
class Case:
    """One message as the core sees it: frames (no routing id), User-Id, receiver, CURVE."""

    frames: list
    user: str | None
    me: str
    curve: bool
    note: str


def valid_chunk(rng: random.Random) -> Case:
    """A whole dense chunk from another DC's server, as its server sends it."""
    me = rng.choice(DCS)
    source = rng.choice([dc for dc in DCS if dc != me])
    code = rng.choice(sorted(ITEMSIZE))
    items = rng.randrange(1, MAX_CHUNK // ITEMSIZE[code] + 1)
    head = header(kind=rng.choice((Kind.CHUNK_UP, Kind.CHUNK_DOWN)), sender=SERVERS[source],
                  flags=rng.choice((0, Flag.QUEUED)), dtype=code, tree=rng.randrange(256),
                  policy=rng.randrange(1 << 32), key=rng.randrange(1 << 32),
                  chunk=rng.randrange(1 << 32), seq=rng.randrange(1 << 64),
                  request=rng.randrange(1 << 64))
    payload = rng.randbytes(items * ITEMSIZE[code])
    curve = rng.random() < 0.7
    user = security.user_id(source).decode() if curve else rng.choice(
        (None, security.user_id(source).decode()))
    return Case([head, b"", payload], user, me, curve, "valid")


def _set_header(case: Case, offset: int, fmt: str, value) -> None:
    """Write ``value`` into the header at ``offset`` (nothing if it is too short for it)."""
    if case.frames and len(case.frames[0]) >= offset + struct.calcsize(fmt):
        head = bytearray(case.frames[0])
        struct.pack_into(fmt, head, offset, value)
        case.frames[0] = bytes(head)


USERS = [None, "", "bulk", "dc:", "dc:dc9", "dc1", "DC:dc1", "dc:dc1\x00", SCHED_USER] + \
    [security.user_id(dc).decode() for dc in DCS]
METAS = [b"{}", b" ", b"{ }", b"null", b"[]", b"\x00", b'{"zz":1}', b'{"from":"dc1"}',
         b'{"part":[0,4],"from":"dc1"}', b'{"part":[0,1]}', b"\xff", b"{}" * 3]


def mutate(case: Case, rng: random.Random) -> Case:
    """``case`` with one random change (the note says which)."""
    frames = list(case.frames)
    case = Case(frames, case.user, case.me, case.curve, case.note)
    what = rng.randrange(14)
    if not frames or not frames[0]:     # no header left to change: change the rest
        what = rng.randrange(3, 14)
    if what == 0:                   # a bit flip anywhere in the header
        bit = rng.randrange(len(frames[0]) * 8)
        head = bytearray(frames[0])
        head[bit // 8] ^= 1 << (bit % 8)
        frames[0], case.note = bytes(head), f"header bit {bit} flipped"
    elif what == 1:                 # one header byte changed
        at = rng.randrange(len(frames[0]))
        head = bytearray(frames[0])
        head[at] = rng.randrange(256)
        frames[0], case.note = bytes(head), f"header byte {at} = {head[at]}"
    elif what == 2:                 # header truncated or extended
        n = rng.choice((0, 1, 37, 39, 40, 76))
        frames[0] = (frames[0] * 3)[:n]
        case.note = f"header of {n} bytes"
    elif what == 3:                 # meta frame contents and size
        meta = rng.choice(METAS + [rng.randbytes(rng.randrange(1, 64))])
        if len(frames) > 1:
            frames[1] = meta
        case.note = f"meta {meta[:20]!r}"
    elif what == 4:                 # payload sizes: 0, not a multiple, around the limit
        item = ITEMSIZE.get(frames[0][8], 1) if frames and len(frames[0]) > 8 else 1
        n = rng.choice((0, 1, item - 1, item + 1, MAX_CHUNK - 1, MAX_CHUNK, MAX_CHUNK + 1,
                        MAX_CHUNK + item, 2 * MAX_CHUNK, rng.randrange(3 * MAX_CHUNK)))
        if len(frames) > 2:
            frames[2] = bytes(max(n, 0))
        case.note = f"payload of {max(n, 0)} bytes"
    elif what == 5:                 # frame counts
        n = rng.choice((0, 1, 2, 4, 5))
        frames[:] = (frames + [bytes(16), b"", bytes(8)])[:n]
        case.note = f"{n} frames"
    elif what == 6:                 # dtype codes
        code = rng.choice((0, 8, 9, 128, 255) + tuple(ITEMSIZE))
        _set_header(case, 8, "<B", code)
        case.note = f"dtype code {code}"
    elif what == 7:                 # flags
        flags = rng.choice([1 << b for b in range(16)] + [0, 0xFFFF, Flag.QUEUED | Flag.ENCODED,
                                                           rng.randrange(1 << 16)])
        _set_header(case, 6, "<H", flags)
        case.note = f"flags {flags:#x}"
    elif what == 8:                 # kinds
        kind = rng.choice([int(k) for k in Kind] + [0, 44, 200, 255])
        _set_header(case, 3, "<B", kind)
        case.note = f"kind {kind}"
    elif what == 9:                 # sender ids: own, other, workers, scheduler, unknown
        sender = rng.choice(sorted(TABLE.nodes) + [5, 10, 4242, NO_NODE,
                                                   rng.randrange(1 << 16)])
        _set_header(case, 4, "<H", sender)
        case.note = f"sender {sender}"
    elif what == 10:                # User-Ids matching, not matching, missing
        case.user = rng.choice(USERS)
        case.note = f"User-Id {case.user!r}"
    elif what == 11:                # CURVE on or off
        case.curve = not case.curve
        case.note = f"curve {case.curve}"
    elif what == 12:                # the receiving server
        case.me = rng.choice(DCS)
        case.note = f"received at {case.me}"
    else:                           # magic and protocol version
        _set_header(case, rng.choice((0, 1, 2)), "<B", rng.randrange(256))
        case.note = "magic or version byte"
    return case


# ---------------------------------------------------------------- tests

def test_plain_valid_chunks_take_the_fast_path():
    """Every whole dense chunk from another DC's server, with and without CURVE, is
    recognised, and the Python path agrees on every field: the fast path is not empty."""
    rng = random.Random(SEED)
    for _ in range(2000):
        case = valid_chunk(rng)
        fast, slow = check_agreement(case.frames, case.user, case.me, case.curve, case.note)
        assert fast and slow, f"a valid chunk left to Python: {case}"


def test_recognised_mutations_are_delivered_equally_by_python():
    """Thousands of random mutations (1 to 3 changes each) of valid chunks: whatever the
    core takes, the Python path delivers whole with equal fields and source DC."""
    rng = random.Random(SEED + 1)
    counts = {"core": 0, "python": 0, "python only": 0, "total": 0}
    for _ in range(30000):
        case = valid_chunk(rng)
        notes = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            case = mutate(case, rng)
            notes.append(case.note)
        fast, slow = check_agreement(case.frames, case.user, case.me, case.curve,
                                     "; ".join(notes))
        counts["total"] += 1
        counts["core"] += fast
        counts["python"] += slow
        counts["python only"] += slow and not fast
    print(f"mutations: {counts}")
    # both outcomes are exercised: mutations that keep the chunk valid, and refusals
    assert 0.05 * counts["total"] < counts["core"] < 0.9 * counts["total"], counts
    assert counts["python only"] > 0, counts      # the core is the stricter (QUEUED|ENCODED...)


@pytest.mark.parametrize("curve", [False, True])
def test_fuzz_corpus(curve):
    """tests/fuzz_messages.py's corpus, received by dc0's and dc1's servers, with the
    User-Id of the claimed sender's DC, of another DC, or none."""
    corpus = fuzz_messages.generate(0)
    accepted = 0
    for fuzz in corpus:
        frames = list(fuzz.frames)
        claimed = wire.claimed_sender(frames) if frames else None
        node = TABLE.nodes.get(claimed)
        users = [security.user_id(node.dc).decode() if node else None, "dc:dc2", None] \
            if curve else [None]
        for me in ("dc0", "dc1"):
            for user in users:
                fast, _ = check_agreement(frames, user, me, curve, fuzz.describe(),
                                          max_chunk=32 << 20)
                accepted += fast
    print(f"corpus, curve {curve}: {accepted} messages took the fast path")
    # the corpus's chunks of future rounds from dc1's server, whole, 64 KiB and 16 MiB
    assert accepted >= 96, accepted


def test_the_python_model_refuses_what_the_server_refuses():
    """The Python path above is the server's: spot checks of what it must refuse."""
    ok = [header(sender=2), b"", bytes(16)]
    user = security.user_id("dc1").decode()
    assert isinstance(python_path(ok, user, "dc0", True), Delivered)
    assert python_path(ok, security.user_id("dc2").decode(), "dc0", True).startswith("refused")
    assert python_path(ok, None, "dc0", True) == "no authenticated key"
    assert python_path(ok, "x", "dc0", True).startswith("a User-Id")
    assert python_path(ok, None, "dc1", False).startswith("refused")      # its own server
    assert python_path([header(sender=3), b"", bytes(16)], None, "dc0", False) \
        .startswith("refused")                                           # a worker
    assert python_path([ok[0], b'{"part":[0,8],"from":"dc1"}', bytes(16)], user, "dc0",
                       True) == "a part, reassembled first"
    relay = b'{"part":[0,4],"from":"dc1","to":"dc0","kind":20,"hops":1}'
    assert python_path([header(kind=Kind.RELAY), relay, bytes(16)], user, "dc0", True) \
        .endswith("not handled as a chunk from a neighbour")
    encoded = python_path([header(flags=Flag.ENCODED), b"", bytes(16)], user, "dc0", True)
    assert isinstance(encoded, Delivered)           # Python's alone: the core leaves it
    assert core_verdict([header(flags=Flag.ENCODED), b"", bytes(16)], user, "dc0", True) is None
    assert np.frombuffer(encoded.msg.frames[0], np.uint8).size == 16
