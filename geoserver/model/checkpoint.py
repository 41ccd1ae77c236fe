"""A checkpoint of a cluster's model: every key's value, the servers' optimizer (its spec
and states) and the round it was taken at, in one ``.npz`` file (docs/recovery.md).

Written by ``kv.save_checkpoint(path)`` from one DC's replica at a round boundary, read by
the servers of a run started with ``launch.py --resume PATH``. NumPy's own format, loaded
with ``allow_pickle=False``; the header (JSON) lists every array with its SHA-256, and a
file whose arrays do not match it is refused naming the array: a torn or corrupted file
never becomes a model. Pure: no sockets.
"""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Checkpoint", "CheckpointError", "FORMAT", "HEADER", "VERSION", "digest",
           "initial_value", "optimizer_problem", "read", "read_header", "write"]

FORMAT = "netstorm-checkpoint"
VERSION = 1
HEADER = "header"


class CheckpointError(ValueError):
    """The checkpoint cannot be written or used; the text names the file and the cause."""


@dataclass
class Checkpoint:
    """``values``: key -> array; ``sparse``: the keys declared row_sparse; ``optimizer``:
    the servers' optimizer spec (None: no optimizer was set) with ``states_meta`` and
    ``state_frames`` as :func:`~netstorm.geoserver.model.optimizer_host.states_to_wire` makes
    them."""

    round: int
    values: dict
    sparse: frozenset = frozenset()
    optimizer: dict | None = None
    states_meta: dict | None = None
    state_frames: list = field(default_factory=list)


def digest(array) -> str:
    """SHA-256 (hex) of an array's bytes, as checkpoints and replicas carry it. O(bytes)."""
    return hashlib.sha256(np.ascontiguousarray(array).view(np.uint8).reshape(-1)).hexdigest()


def write(path, checkpoint: Checkpoint) -> None:
    """Write ``checkpoint`` to ``path`` atomically (a partial file never has its name).
    O(model size)."""
    arrays = {f"value_{k}": np.asarray(v) for k, v in checkpoint.values.items()}
    arrays.update({f"state_{i}": np.frombuffer(memoryview(f), np.uint8)
                   for i, f in enumerate(checkpoint.state_frames)})
    header = {"format": FORMAT, "version": VERSION, "round": int(checkpoint.round),
              "keys": sorted(int(k) for k in checkpoint.values),
              "sparse": sorted(int(k) for k in checkpoint.sparse),
              "optimizer": checkpoint.optimizer, "states": checkpoint.states_meta,
              "state_frames": len(checkpoint.state_frames),
              "sha256": {name: digest(a) for name, a in arrays.items()}}
    arrays[HEADER] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as out:
        np.savez(out, **arrays)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, path)


def read_header(path) -> dict:
    """The header of the checkpoint ``path``, checked for format and version."""
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(data[HEADER].tobytes())
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: not a netstorm checkpoint ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a netstorm checkpoint")
    if header.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint version {header.get('version')}, this "
                              f"netstorm reads {VERSION}")
    return header


def read(path) -> Checkpoint:
    """The checkpoint ``path``, every array checked against its SHA-256. O(model size)."""
    header = read_header(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in header["sha256"]}
        values = {int(k): arrays[f"value_{k}"] for k in header["keys"]}
        frames = [arrays[f"state_{i}"] for i in range(int(header["state_frames"]))]
        for name, expected in header["sha256"].items():
            if digest(arrays[name]) != expected:
                raise CheckpointError(f"{path}: array {name!r} does not match its checksum "
                                      f"(corrupted file); refusing it")
        return Checkpoint(int(header["round"]), values, frozenset(header["sparse"]),
                          header["optimizer"], header["states"], frames)
    except CheckpointError:
        raise
    except (OSError, KeyError, TypeError, ValueError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint ({exc})") from None


def initial_value(checkpoint: Checkpoint | None, key: int, shape, dtype):
    """The value ``key`` starts from in a resumed run (None: the key is not in
    ``checkpoint``, its initial value stands); :class:`CheckpointError` if the script
    declares it with another shape or dtype than it was saved with. O(key size)."""
    if checkpoint is None or key not in checkpoint.values:
        return None
    saved = checkpoint.values[key]
    if tuple(saved.shape) != tuple(shape) or saved.dtype != np.dtype(dtype):
        raise CheckpointError(f"key {key} was saved as {tuple(saved.shape)} {saved.dtype}, "
                              f"the script declares {tuple(shape)} {np.dtype(dtype)}")
    return np.array(saved.reshape(-1), copy=True)


def optimizer_problem(checkpoint: Checkpoint | None, spec: dict) -> str:
    """Why the optimizer ``spec`` cannot continue from ``checkpoint``'s states ("" if it
    can, or if there are none to continue from: then it starts afresh). The script may
    change hyper-parameters (a lower learning rate, say), not the optimizer."""
    if checkpoint is None or checkpoint.optimizer is None:
        return ""
    saved = checkpoint.optimizer.get("name")
    if not isinstance(spec, dict) or spec.get("name") != saved:
        return (f"the checkpoint holds the states of optimizer {saved!r}; the script sets "
                f"{spec.get('name') if isinstance(spec, dict) else spec!r}: resume with the "
                f"same optimizer")
    return ""
