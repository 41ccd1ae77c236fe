"""Fused messages: many small requests, replies or WAN chunks to one peer as one message.

A Trainer step sends one PUSH per parameter and gets one VALUE back; most of resnet18's 62
parameters are a few hundred bytes (batch-norm scales and shifts), and each message costs both
processes a ZeroMQ send and receive, a poll and a wake-up, a header and a meta frame to decode and
check, whatever its size. Like Horovod's tensor fusion, the worker holds its small requests for a
moment (:class:`netstorm.geoserver.worker.outbox.Outbox`) and sends what gathered as one BATCH; the
server sends the replies one drain of its socket produced as one BATCH. Between servers, a link's
send queue hands over the small chunks that wait for it, most urgent first, as one BATCH
(:mod:`netstorm.geoserver.server.wan.send_queue`): a model's small keys then cost a link one message
(and one CURVE box of header and meta) per round instead of one each.

A BATCH is an envelope, not a new request: its meta lists one row per message it carries,
``[kind, key, seq, request, flags, dtype code, frames, meta]`` (a chunk's meta adds ``at``:
its policy version, tree and chunk index), and its tensor frames are
theirs, in order (its header names ``uint8``: a frame's element type is its row's). The
receiving Van takes it apart (:func:`unpack`) and checks every message it carried against
that message's own kind's schema, exactly as if it had come alone; handlers never see a
BATCH. Only :data:`FUSIBLE` kinds travel inside one (never a BATCH), at most
:data:`MAX_MESSAGES`. Pure: no sockets, no clock (times are passed in).
"""
from __future__ import annotations

__all__ = ["CHUNK_KINDS", "FUSIBLE", "MAX_MESSAGES", "pack", "unpack"]

import numpy as np

from . import kinds, schema
from .wire import DTYPES, Kind, Message, WireError, dtype_code, flags_of, kind_of, \
    wire_size

FUSIBLE = kinds.FUSIBLE                 # the kinds a BATCH may carry
MAX_MESSAGES = schema.MAX_BATCH_MESSAGES  # and how many
CHUNK_KINDS = frozenset({Kind.CHUNK_UP, Kind.CHUNK_DOWN})    # carry their position
_AT = schema.Row(schema.Int(0, schema.U32), schema.Int(0, 255), schema.Int(0, schema.U32))


def pack(messages) -> Message:
    """One BATCH carrying ``messages`` (each of a :data:`FUSIBLE` kind, at least one, at
    most :data:`MAX_MESSAGES`); their frames are passed on untouched (zero-copy). O(n)."""
    if not 0 < len(messages) <= MAX_MESSAGES:
        raise ValueError(f"a BATCH carries 1 to {MAX_MESSAGES} messages, not "
                         f"{len(messages)}")
    items, frames = [], []
    for msg in messages:
        if msg.kind not in FUSIBLE:
            raise ValueError(f"{msg.kind.name} does not travel in a BATCH")
        meta = msg.meta or {}
        if msg.kind in CHUNK_KINDS:     # its policy version, tree and chunk index
            meta = {**meta, "at": [msg.policy, msg.tree, msg.chunk]}
        items.append([int(msg.kind), msg.key, msg.seq, msg.request, int(msg.flags),
                      0 if msg.dtype is None else dtype_code(msg.dtype), len(msg.frames),
                      meta])
        frames.extend(msg.frames)
    return Message(Kind.BATCH, meta={"items": items}, dtype=np.uint8, frames=frames)


def unpack(batch: Message) -> list:
    """The messages a BATCH (already checked against the BATCH schema) carries, each with
    the envelope's sender and origin, each checked against its own kind's schema; raises
    :class:`~netstorm.geoserver.core.wire.WireError` naming the first one that is not valid
    (the whole BATCH is then refused: its sender built it wrong). O(messages + frames)."""
    items, frames = batch.meta["items"], batch.frames
    carried = sum(item[6] for item in items)
    if carried != len(frames):
        raise schema.SchemaError(f"BATCH: its rows name {carried} frames, it has "
                                 f"{len(frames)}")
    messages, first = [], 0
    for i, (kind, key, seq, request, flags, code, count, meta) in enumerate(items):
        policy, tree, chunk = 0, 0, 0
        if kind in CHUNK_KINDS:         # a chunk's header fields travel in its meta
            meta = dict(meta)
            at = meta.pop("at", [0, 0, 0])
            _AT.check(at, f"BATCH: message {i}: meta.at")
            policy, tree, chunk = at
        dtype = DTYPES[code]
        own = frames[first:first + count]
        first += count
        if own and dtype is None:
            raise schema.SchemaError(f"BATCH: message {i} has frames but no dtype")
        for frame in own:
            if memoryview(frame).nbytes % dtype.itemsize:
                raise schema.SchemaError(f"BATCH: message {i} has a frame of "
                                         f"{memoryview(frame).nbytes} "
                                         f"bytes, not a multiple of {dtype}'s itemsize")
        msg = Message(kind_of(kind), sender=batch.sender, key=key, seq=seq, request=request,
                      flags=flags_of(flags), dtype=dtype, meta=meta, frames=own,
                      origin=batch.origin, policy=policy, tree=tree, chunk=chunk,
                      wire_bytes=0 if i else wire_size(batch))
        try:
            messages.append(kinds.validate(msg))
        except WireError as exc:
            raise schema.SchemaError(f"BATCH: message {i}: {exc}") from None
    return messages
