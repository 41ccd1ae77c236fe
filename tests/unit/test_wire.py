import json

import numpy as np
import pytest

from netstorm.geoserver.core import wire
from netstorm.geoserver.core.wire import Flag, Kind, Message, WireError


def test_roundtrip_keeps_every_field_and_tensor_bytes():
    a = np.arange(10, dtype=np.float16)
    msg = Message(Kind.PUSH, sender=7, key=3, chunk=2, seq=11, request=5, policy=4,
                  flags=Flag.WANT_VALUE, dtype=a.dtype, meta={"x": [1, 2]}, frames=[a, a[:3]])
    got = wire.decode(wire.encode(msg))
    assert (got.kind, got.sender, got.key, got.chunk, got.seq, got.request, got.policy) == \
        (Kind.PUSH, 7, 3, 2, 11, 5, 4)
    assert got.flags == Flag.WANT_VALUE and got.dtype == np.float16 and got.meta == {"x": [1, 2]}
    arrays = got.arrays()
    assert np.array_equal(arrays[0], a) and np.array_equal(arrays[1], a[:3])


def test_tensor_frames_are_passed_through_without_copy():
    a = np.ones(1000, dtype=np.float32)
    frames = wire.encode(Message(Kind.PUSH, dtype=a.dtype, frames=[a]))
    assert frames[2] is a


def test_header_is_small_and_versioned():
    header = wire.encode(Message(Kind.HEARTBEAT))[0]
    assert len(header) == wire.HEADER.size < 64
    assert header[:2] == wire.MAGIC and header[2] == wire.PROTOCOL_VERSION


def _good():
    return wire.encode(Message(Kind.PULL, key=1))


@pytest.mark.parametrize("mutate,reason", [
    (lambda f: f[:1], "expected at least 2 frames"),
    (lambda f: [b"XX" + f[0][2:], f[1]], "bad magic"),
    (lambda f: [f[0][:2] + bytes([9]) + f[0][3:], f[1]], "protocol version 9"),
    (lambda f: [f[0][:3] + bytes([200]) + f[0][4:], f[1]], "unknown message kind 200"),
    (lambda f: [f[0][:-1], f[1]], "header is"),
    (lambda f: [f[0], b"\xff\xfe"], "not JSON"),
    (lambda f: [f[0], json.dumps([1]).encode()], "not a JSON object"),
    (lambda f: [f[0], b"", b"1234"], "no dtype"),
])
def test_malformed_messages_are_rejected_with_a_reason(mutate, reason):
    with pytest.raises(WireError, match=reason):
        wire.decode(mutate(_good()))


def test_frame_not_a_multiple_of_dtype_is_rejected():
    frames = wire.encode(Message(Kind.PUSH, dtype=np.float32, frames=[b"abcde"]))
    with pytest.raises(WireError, match="not a multiple"):
        wire.decode(frames)


def test_unsupported_dtype_is_a_clear_error():
    with pytest.raises(WireError, match="unsupported dtype"):
        wire.encode(Message(Kind.PUSH, dtype=np.complex64, frames=[]))


def test_nothing_is_unpickled():
    import pickle
    payload = pickle.dumps({"evil": 1})
    with pytest.raises(WireError):
        wire.decode([_good()[0], payload])


def _with_meta(raw: bytes) -> list:
    return [_good()[0], raw]


@pytest.mark.parametrize("raw,reason", [
    (b'{"a":' + b"[" * 1000 + b"]" * 1000 + b"}", "nests 1001 deep"),
    (b'{"a":' + b"[" * 100000, "nests 100001 deep"),            # no RecursionError either
    (b'{"a":' + b"9" * 5000 + b"}", "integer of 5000 digits"),     # beyond int max str digits
    (b'{"a":-' + b"9" * 41 + b"}", "integer of 41 digits"),
    (b'{"a":NaN}', "NaN is not a number JSON allows"),
    (b'{"a":[Infinity]}', "Infinity is not a number"),
    (b'{"a":-Infinity}', "-Infinity is not a number"),
    (b'{"a":1e400}', "number 1e400 is not finite"),
    (b'{"a":"' + b"x" * wire.MAX_META_BYTES + b'"}', "exceeds 1048576"),
])
def test_meta_limits_are_enforced_before_anything_can_blow_up(raw, reason):
    with pytest.raises(WireError, match=reason):
        wire.decode(_with_meta(raw))


def test_meta_within_the_limits_still_decodes():
    deep = "[" * (wire.MAX_META_DEPTH - 1) + "]" * (wire.MAX_META_DEPTH - 1)
    brackets_in_strings = "[" * 5000
    meta = wire.decode(_with_meta(json.dumps(
        {"deep": json.loads(deep), "s": brackets_in_strings, "q": 'a\\"[[{',
         "n": -(10 ** 39), "f": 1.5e300}).encode())).meta
    assert meta["s"] == brackets_in_strings and meta["n"] == -(10 ** 39)


def test_nesting_ignores_brackets_inside_strings():
    assert wire.nesting('{"a": "[[[\\"[[", "b": [[1], {"c": [2]}]}') == 4
    assert wire.nesting("") == 0


def test_nesting_carries_depth_across_blocks():
    block = wire._NESTING_BLOCK
    assert wire.nesting("[" * (3 * block) + "]" * (3 * block)) == 3 * block
    # the deepest point in a later block, reached from a depth the earlier block left
    assert wire.nesting("[" * block + "]" + "[[") == block + 1
    assert wire.nesting("]" * block + "[[") == 0     # never deeper than it starts


def test_decode_checks_each_kind_s_meta_limit_before_parsing():
    frames = wire.encode(Message(Kind.PULL, sender=3, meta={"s": "x" * 100}))
    limits = {Kind.PULL: 64}
    with pytest.raises(WireError, match=r"PULL meta frame of \d+ bytes exceeds 64"):
        wire.decode(frames, limits)
    assert wire.decode(frames, {Kind.PUSH: 64}).meta["s"] == "x" * 100   # others: the maximum


def test_claimed_sender_reads_the_header_when_there_is_one():
    frames = wire.encode(Message(Kind.PULL, sender=12))
    assert wire.claimed_sender(frames) == 12
    assert wire.claimed_sender([b"short"]) is None and wire.claimed_sender([]) is None


def test_check_sizes_takes_frames_at_the_limits_and_names_the_limit_one_byte_over():
    """Issue 34 (h): the sender refuses what a receiver would drop (meta) or what would cost
    it the connection (a frame over MAXMSGSIZE), instead of losing it silently."""
    frames = [b"h" * wire.HEADER.size, b"m" * 100, np.zeros(50, np.uint8), b"x" * 200]
    wire.check_sizes(wire.Kind.PROBE, frames, 100, 200)
    with pytest.raises(wire.WireError, match="PROBE: meta frame of 100 bytes exceeds this "
                                             "kind's limit of 99 bytes"):
        wire.check_sizes(wire.Kind.PROBE, frames, 99, 200)
    with pytest.raises(wire.WireError, match=r"PROBE: frame 3 of 200 bytes exceeds "
                                             r"MAX_FRAME_BYTES \(199 bytes\)"):
        wire.check_sizes(wire.Kind.PROBE, frames, 100, 199)
