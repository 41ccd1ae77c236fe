"""A DC server's replica of some keys as one STATE message, and its checks on arrival.

When a lost DC server is replaced (docs/recovery.md), the replacement, and any surviving DC
that had not yet applied a key's latest round, copy the key from a peer DC that had: its
value, its optimizer state and update count, and the optimizer's spec. Every value travels
with the SHA-256 its source reported to the scheduler when the cluster froze; the receiver
refuses a copy whose round or digest differs from the plan the scheduler sent it, so a
corrupted or stale replica is never adopted.

Pure: no sockets. Values travel as raw frames (bytes viewed as uint8), never pickled;
optimizer states use :func:`~netstorm.geoserver.model.optimizer_host.states_to_wire`.
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


def encode(replicas: list, spec, states) -> tuple:
    """``(meta, frames)`` of a STATE message: ``replicas`` (:class:`KeyReplica`), the
    optimizer's ``spec`` (None: no optimizer) and ``states`` = ``(states, counts,
    num_update)`` of those keys. O(bytes) (the digests)."""
    meta = {"keys": [[r.key, r.round, list(r.shape), r.dtype.str, r.sparse, digest(r.value)]
                     for r in replicas], "spec": spec, "states": None}
    frames = [np.ascontiguousarray(r.value).view(np.uint8).reshape(-1) for r in replicas]
    if spec is not None:
        meta["states"], state_frames = states_to_wire(*states)
        meta["states_digest"] = _frames_digest(state_frames)
        frames += state_frames
    return meta, frames


def decode(meta: dict, frames, expected: dict) -> tuple:
    """The replicas of a STATE message (checked against its schema on receipt) as
    ``([KeyReplica], spec, states_meta, state_frames)``. ``expected``: ``{key: (round,
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
    state_frames = list(frames[len(meta["keys"]):])
    if meta.get("states") is not None and \
            _frames_digest(state_frames) != meta.get("states_digest"):
        raise ReplicaError("the optimizer states fail their checksum")
    return replicas, meta.get("spec"), meta.get("states"), state_frames
