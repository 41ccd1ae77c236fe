"""netstorm.geoserver.core.batch: a BATCH carries small messages whole, each still checked
against its own kind's schema; the outbox says when to wake the sender and when to send."""
import numpy as np
import pytest

from netstorm.geoserver.core import batch, kinds, schema, wire
from netstorm.geoserver.worker.outbox import Outbox
from netstorm.geoserver.core.wire import Flag, Kind, Message

F4 = np.arange(5, dtype=np.float32)
F2 = np.arange(3, dtype=np.float16)


def roundtrip(msg: Message) -> Message:
    return kinds.validate(wire.decode([bytes(f) for f in wire.encode(msg)]))


def carried():
    return [Message(Kind.PUSH, key=3, seq=2, request=7, flags=Flag.WANT_VALUE,
                    dtype=F4.dtype, frames=[F4]),
            Message(Kind.PULL, key=4, seq=2, request=8, flags=Flag.REPLY_SHARED),
            Message(Kind.PUSH, key=5, seq=2, flags=Flag.SHARED, dtype=F4.dtype),
            Message(Kind.VALUE, key=6, seq=1, request=9, meta={"steps": 3}, dtype=F2.dtype,
                    frames=[F2])]


def test_every_message_comes_out_as_it_went_in_with_the_envelopes_sender_and_origin():
    envelope = roundtrip(batch.pack(carried()))
    envelope.sender, envelope.origin = 12, "eu"
    out = batch.unpack(envelope)
    assert [(m.kind, m.key, m.seq, m.request, m.flags, m.dtype, m.meta) for m in out] == \
        [(m.kind, m.key, m.seq, m.request, m.flags, m.dtype, m.meta) for m in carried()]
    assert all(m.sender == 12 and m.origin == "eu" for m in out)
    assert np.array_equal(out[0].arrays()[0], F4) and out[1].frames == [] and \
        np.array_equal(out[3].arrays()[0], F2)


def test_pack_refuses_what_may_not_travel_in_a_batch():
    with pytest.raises(ValueError, match="INIT does not travel in a BATCH"):
        batch.pack([Message(Kind.INIT, meta={"shape": [1], "dtype": "<f4"})])
    with pytest.raises(ValueError, match="1 to 128 messages"):
        batch.pack([])
    with pytest.raises(ValueError, match="1 to 128 messages"):
        batch.pack([Message(Kind.PULL, key=k) for k in range(129)])


def rows(msg: Message) -> list:
    return msg.meta["items"]


@pytest.mark.parametrize("change,reason", [
    (lambda m: rows(m)[0].__setitem__(6, 0), "rows name 0 frames, it has 1"),
    (lambda m: rows(m)[1].__setitem__(4, int(Flag.HAS_VALUE)),
     "message 1: PULL: flags 0x2 not allowed"),
    (lambda m: rows(m)[0].__setitem__(5, 0), "message 0 has frames but no dtype"),
    (lambda m: rows(m)[0].__setitem__(5, 3), "not a multiple of float64's itemsize"),
    (lambda m: rows(m)[1].__setitem__(7, {"steps": 2}), "message 1: PULL: meta has unknown "
                                                        "field 'steps'"),
    (lambda m: rows(m)[0].__setitem__(4, int(Flag.SHARED)),
     "message 0: PUSH: 1 tensor frames, expected 0"),
])
def test_a_carried_message_its_schema_refuses_refuses_the_batch_naming_it(change, reason):
    msg = batch.pack([Message(Kind.PUSH, key=1, seq=1, dtype=F4.dtype, frames=[F4]),
                      Message(Kind.PULL, key=2, seq=1)])
    change(msg)
    with pytest.raises(schema.SchemaError, match=reason):
        batch.unpack(roundtrip(msg))


@pytest.mark.parametrize("items,reason", [
    ([], "meta.items is empty"),
    ([[int(Kind.BATCH), 0, 0, 0, 0, 0, 0, {}]], r"meta.items\[0\]\[0\] must be one of"),
    ([[int(Kind.INIT), 0, 0, 0, 0, 0, 0, {}]], r"meta.items\[0\]\[0\] must be one of"),
    ([[int(Kind.PULL), 0, 0, 0, 0, 99, 0, {}]], r"meta.items\[0\]\[5\] must be one of"),
    ([[int(Kind.PULL), 0, 0, 0, 0, 0, 2, {}]], r"meta.items\[0\]\[6\] must be an integer in"),
    ([[int(Kind.PULL), -1, 0, 0, 0, 0, 0, {}]], r"meta.items\[0\]\[1\] must be an integer"),
    ([[int(Kind.PULL), 0, 0, 0, 0, 0, 0]], r"meta.items\[0\] must be a list of 8 items"),
    ([[int(Kind.PULL), 0, 0, 0, 0, 0, 0, []]], r"meta.items\[0\]\[7\] must be an object"),
    ([[int(Kind.PULL), 0, 0, 0, 0, 0, 0, {}]] * 129, "a list of at most 128 items"),
])
def test_the_envelope_itself_is_checked_before_anything_is_taken_apart(items, reason):
    msg = Message(Kind.BATCH, meta={"items": items}, dtype=np.uint8)
    with pytest.raises(schema.SchemaError, match=reason):
        roundtrip(msg)


def test_the_envelope_must_say_uint8():
    msg = batch.pack([Message(Kind.PULL, key=1)])
    msg.dtype = np.float32
    with pytest.raises(schema.SchemaError, match="header dtype float32, expected uint8"):
        roundtrip(msg)


def test_the_outbox_wakes_on_the_first_message_and_is_due_a_linger_later():
    box = Outbox(linger_s=0.002)
    assert box.due() is None and box.take() is None
    assert box.add(Message(Kind.PULL, key=1), now=10.0) == Outbox.WAKE
    assert box.add(Message(Kind.PULL, key=2), now=10.001) == Outbox.NONE
    assert box.due() == pytest.approx(10.002)
    sent = box.take()
    assert sent.kind == Kind.BATCH and [m.key for m in batch.unpack(roundtrip(sent))] == [1, 2]
    assert box.due() is None and (box.batches, box.fused) == (1, 2)
    assert box.add(Message(Kind.PULL, key=3), now=11.0) == Outbox.WAKE    # a new batch


def test_one_message_alone_goes_as_itself():
    box = Outbox(linger_s=0.0)
    msg = Message(Kind.PUSH, key=1, seq=1, dtype=F4.dtype, frames=[F4])
    box.add(msg, now=0.0)
    assert box.take() is msg and box.batches == 0


def test_the_outbox_says_send_when_full_by_count_or_by_bytes():
    box = Outbox(linger_s=1.0, max_bytes=40, max_messages=3)
    assert [box.add(Message(Kind.PULL, key=k), 0.0) for k in range(3)] == \
        [Outbox.WAKE, Outbox.NONE, Outbox.SEND]
    box.take()
    big = np.zeros(6, np.float32)      # 24 bytes each
    assert box.add(Message(Kind.PUSH, key=1, dtype=big.dtype, frames=[big]), 0.0) == Outbox.WAKE
    assert box.add(Message(Kind.PUSH, key=2, dtype=big.dtype, frames=[big]), 0.0) == Outbox.SEND
    assert box.bytes == 48


def test_clear_drops_what_waits():
    box = Outbox(linger_s=0.0)
    box.add(Message(Kind.PULL, key=1), 0.0)
    assert box.clear() == 1 and box.take() is None and box.due() is None


def test_a_chunk_keeps_its_policy_tree_and_index_and_the_first_message_counts_the_bytes():
    up = Message(Kind.CHUNK_UP, key=3, seq=9, policy=7, tree=2, chunk=5,
                 flags=Flag.QUEUED, dtype=F4.dtype, frames=[F4])
    down = Message(Kind.CHUNK_DOWN, key=4, seq=9, policy=7, tree=1, chunk=0,
                   meta={"part": [0, 10], "from": "eu"}, dtype=F4.dtype, frames=[F4])
    envelope = roundtrip(batch.pack([up, down]))
    first, second = batch.unpack(envelope)
    assert (first.policy, first.tree, first.chunk, first.flags) == (7, 2, 5, Flag.QUEUED)
    assert (second.policy, second.tree, second.chunk, second.meta) == \
        (7, 1, 0, {"part": [0, 10], "from": "eu"})
    assert first.wire_bytes == wire.wire_size(envelope) > 2 * F4.nbytes
    assert second.wire_bytes == 0 and wire.wire_size(up) == wire.HEADER.size + F4.nbytes


@pytest.mark.parametrize("at,reason", [
    ([1, 256, 0], r"meta.at\[1\] must be an integer in \[0, 255\]"),
    ([1, 2], "meta.at must be a list of 3 items"),
    ("x", "meta.at must be a list of 3 items"),
])
def test_a_chunks_position_is_checked(at, reason):
    msg = batch.pack([Message(Kind.CHUNK_UP, key=1, seq=1, dtype=F4.dtype, frames=[F4])])
    rows(msg)[0][7] = {"at": at}
    with pytest.raises(schema.SchemaError, match=reason):
        batch.unpack(roundtrip(msg))


def test_a_request_may_not_carry_a_position():
    msg = batch.pack([Message(Kind.PULL, key=1)])
    rows(msg)[0][7] = {"at": [0, 0, 0]}
    with pytest.raises(schema.SchemaError, match="PULL: meta has unknown field 'at'"):
        batch.unpack(roundtrip(msg))


def test_the_largest_rows_a_node_builds_fit_the_batch_meta_limit():
    """Every BATCH a node builds must pass the receiver's meta-size check (16 KiB, before
    parsing): 128 rows with every header field at its largest, a chunk's position (whole
    chunks only: the send queue fuses no part of one) or an esync step count."""
    from netstorm.geoserver.config.sync import MAX_COUNT
    top = (1 << 64) - 1
    chunk = Message(Kind.CHUNK_DOWN, key=(1 << 32) - 1, seq=top, request=top,
                    flags=Flag(0x3F), policy=(1 << 32) - 1, tree=255, chunk=(1 << 32) - 1,
                    dtype=np.int64, frames=[])
    value = Message(Kind.VALUE, key=(1 << 32) - 1, seq=top, request=top, flags=Flag(0x3F),
                    meta={"steps": MAX_COUNT}, dtype=np.int64, frames=[])
    for msg in (chunk, value):
        meta = wire.encode(batch.pack([msg] * batch.MAX_MESSAGES))[1]
        assert len(meta) <= kinds.META_LIMITS[Kind.BATCH], len(meta)


def test_a_row_takes_every_key_seq_and_request_a_header_takes():
    """What travels alone travels fused: a server's reply echoes any request id a header
    carried (up to 2**64 - 1), and a BATCH refused for one row loses every reply in it."""
    largest = [Message(Kind.PULL, key=(1 << 32) - 1, seq=(1 << 64) - 1,
                       request=(1 << 64) - 1, flags=Flag.REPLY_SHARED),
               Message(Kind.VALUE, key=(1 << 32) - 1, seq=(1 << 64) - 1,
                       request=(1 << 64) - 1, dtype=F4.dtype, frames=[F4])]
    for msg in largest:
        roundtrip(msg)                          # valid alone
    out = batch.unpack(roundtrip(batch.pack(largest)))
    assert [(m.key, m.seq, m.request) for m in out] == \
        [(m.key, m.seq, m.request) for m in largest]
