"""What a DC server's sync mode keeps per key beyond its value and optimizer state, copied
with a replica when a lost DC server is replaced (docs/recovery.md, docs/sync.md).

- ``fsa``: nothing (the value and the optimizer's states and counts travel already).
- ``hfa`` (one DC round per WAN round), ``esync``: nothing: after a WAN round a key's
  weights at the last WAN round (``base``) are its value, set from the copied value.
- ``diloco``: the outer optimizer's Nesterov momentum buffer of each key
  (:class:`~netstorm.geoserver.server.sync_modes.OuterNesterov`), identical in every DC.
- ``mixed``: not replaceable (each DC's replica is its own; the cluster file refuses it).

Pure: the mode's arrays are given and taken as NumPy arrays; :mod:`.replica` puts them on
the wire with a digest. O(keys) plus the copies, O(bytes).
"""
from __future__ import annotations

import numpy as np

from .sync_modes import DilocoMode

__all__ = ["ModeStateError", "adopt", "export"]


class ModeStateError(ValueError):
    """A peer's mode state that does not fit this server's mode."""


def export(mode, keys) -> list:
    """``[(key, flat array)]``: ``mode``'s own state of ``keys`` (a copy of each, in key
    order; keys without any are left out)."""
    if not isinstance(mode, DilocoMode):
        return []
    buffers = mode.outer.buffers
    return [(k, np.ascontiguousarray(buffers[k]).reshape(-1).copy())
            for k in sorted(set(keys)) if k in buffers]


def adopt(mode, keys, arrays: dict, shapes: dict) -> None:
    """``keys`` take a peer's mode state ``arrays`` (``{key: flat array}``, kept flat as
    the mode keeps them; a key without one has none here either); ``shapes``: each key's
    shape. Raises
    :class:`ModeStateError` for state this mode does not keep, a key not among ``keys``,
    or an array of another size than its key. O(bytes)."""
    if not isinstance(mode, DilocoMode):
        if arrays:
            raise ModeStateError(f"it carries per-key state ({len(arrays)} arrays), which "
                                 f"this server's sync mode does not keep")
        return
    for key, array in arrays.items():
        if key not in keys:
            raise ModeStateError(f"it carries mode state of key {key}, not copied with it")
        if array.size != int(np.prod(shapes[key])):
            raise ModeStateError(f"the outer momentum of key {key} has {array.size} "
                                 f"elements, the key {int(np.prod(shapes[key]))}")
    for key in keys:
        mode.outer.buffers.pop(key, None)
    for key, array in arrays.items():
        mode.outer.buffers[key] = array
