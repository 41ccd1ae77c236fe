"""A DC server's replica of some keys as one STATE message, and its checks on arrival.

When a lost DC server is replaced (docs/recovery.md), the replacement, and any surviving DC
that had not yet applied a key's latest round, copy the key from a peer DC that had: its
value, its optimizer state and update count, and the optimizer's spec. Every value travels
with the SHA-256 its source reported to the scheduler when the cluster froze; the receiver
refuses a copy whose round or digest differs from the plan the scheduler sent it, so a
corrupted or stale replica is never adopted.

Pure: no sockets. Values travel as raw frames (bytes viewed as uint8), never pickled;
optimizer states use :func:`~netstorm.geoserver.model.optimizer_host.states_to_wire`; a
sync mode's own per-key state (diloco's outer momentum, :mod:`.mode_replica`) travels last,
checked by a digest of its own.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..model.checkpoint import digest
from ..model.optimizer_host import states_to_wire

__all__ = ["KeyReplica", "ReplicaError", "decode", "encode"]


class ReplicaError(ValueError):
    """A replica that cannot be adopted: the text names the key and what differs."""


def _frames_digest(frames) -> str:
    h = hashlib.sha256()
    for frame in frames:
        h.update(memoryview(frame).cast("B"))
    return h.hexdigest()


@dataclass(frozen=True)
class KeyReplica:
    key: int
    round: int          # the rounds applied to ``value``
    shape: tuple
    dtype: np.dtype
    sparse: bool
    value: np.ndarray   # flat


def _raw(array) -> np.ndarray:
    return np.ascontiguousarray(array).view(np.uint8).reshape(-1)


def encode(replicas: list, spec, states, mode_arrays=()) -> tuple:
    """``(meta, frames)`` of a STATE message: ``replicas`` (:class:`KeyReplica`), the
    optimizer's ``spec`` (None: no optimizer) and ``states`` = ``(states, counts,
    num_update)`` of those keys, and the sync mode's own state of them, ``mode_arrays`` =
    ``[(key, flat array)]`` (:mod:`.mode_replica`; last, with a digest of their own).
    O(bytes) (the digests)."""
    meta = {"keys": [[r.key, r.round, list(r.shape), r.dtype.str, r.sparse, digest(r.value)]
                     for r in replicas], "spec": spec, "states": None, "mode": None}
    frames = [_raw(r.value) for r in replicas]
    if spec is not None:
        meta["states"], state_frames = states_to_wire(*states)
        meta["states_digest"] = _frames_digest(state_frames)
        frames += state_frames
    if mode_arrays:
        mode_frames = [_raw(a) for _, a in mode_arrays]
        meta["mode"] = {"buffers": [[int(k), a.dtype.str, int(a.size)] for k, a in mode_arrays],
                        "digest": _frames_digest(mode_frames)}
        frames += mode_frames
    return meta, frames


def _mode_arrays(mode: dict | None, frames) -> dict:
    """``{key: flat array}`` of the sync mode's state (the last frames of a STATE), checked
    against their sizes and digest."""
    if mode is None:
        return {}
    rows = mode["buffers"]
    if len(rows) > len(frames):
        raise ReplicaError(f"the sync mode's state names {len(rows)} arrays, the message "
                           f"has {len(frames)} frames after the values")
    own = frames[len(frames) - len(rows):]
    if _frames_digest(own) != mode["digest"]:
        raise ReplicaError("the sync mode's state fails its checksum")
    arrays = {}
    for (key, dtype, size), frame in zip(rows, own):
        if key in arrays or len(frame) != size * np.dtype(dtype).itemsize:
            raise ReplicaError(f"the sync mode's state of key {key} is doubled or is not "
                               f"{size} x {dtype}")
        arrays[int(key)] = np.frombuffer(frame, dtype=np.uint8).view(np.dtype(dtype)).copy()
    return arrays


def decode(meta: dict, frames, expected: dict) -> tuple:
    """The replicas of a STATE message (checked against its schema on receipt) as
    ``([KeyReplica], spec, states_meta, state_frames, mode_arrays)`` (the last: ``{key:
    flat array}`` of the sync mode's own state, see :func:`encode`). ``expected``: ``{key: (round,
    digest)}`` as the scheduler's plan names them; a key not asked for, at another round,
    or whose bytes do not hash to the planned digest raises :class:`ReplicaError`, and so
    do optimizer states whose bytes differ from the digest sent with them. O(bytes)."""
    replicas = []
    for i, (key, rnd, shape, dtype, sparse, _) in enumerate(meta["keys"]):
        if key not in expected:
            raise ReplicaError(f"key {key} was not asked for")
        want_round, want_digest = expected[key]
        if rnd != want_round:
            raise ReplicaError(f"key {key} is at round {rnd}, the plan says {want_round}")
        raw = np.frombuffer(frames[i], dtype=np.uint8)
        got = digest(raw)
        if got != want_digest:
            raise ReplicaError(f"key {key} (round {rnd}) fails its checksum: SHA-256 "
                               f"{got[:16]}..., the source reported {want_digest[:16]}...")
        value = raw.view(np.dtype(dtype)).copy()        # owned: frames are read-only views
        replicas.append(KeyReplica(int(key), int(rnd), tuple(shape), np.dtype(dtype),
                                   bool(sparse), value))
    rest = list(frames[len(meta["keys"]):])
    mode = meta.get("mode")
    arrays = _mode_arrays(mode, rest)
    state_frames = rest[:len(rest) - len(mode["buffers"])] if mode else rest
    if meta.get("states") is not None and \
            _frames_digest(state_frames) != meta.get("states_digest"):
        raise ReplicaError("the optimizer states fail their checksum")
    return replicas, meta.get("spec"), meta.get("states"), state_frames, arrays
