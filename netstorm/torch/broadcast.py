"""Rank 0's parameters and optimizer state on every worker (docs/torch.md).

A broadcast is a key's INIT: rank 0's init carries its value, which the DC servers spread to
every DC (once per WAN link); every worker then pulls it. The tensors are packed by dtype
into one flat key each (a model of any size costs one INIT and one pull per dtype, not per
tensor), under fresh keys for every call. O(elements) per worker, one copy in and out.

Every worker must broadcast the same structure (names, shapes, dtypes, in the same order).
Before the values, a small int64 key carries rank 0's layout digest and each worker
compares it with its own: a mismatch is an error naming it, never a silent misassignment.
"""
from __future__ import annotations

import hashlib
import numbers

import numpy as np
import torch

from .arrays import flat_view, numpy_dtype, write_back
from .session import Session, TorchSessionError

__all__ = ["broadcast_optimizer_state", "broadcast_parameters", "broadcast_tensors"]


def _check_root(root_rank: int) -> None:
    if root_rank != 0:
        raise TorchSessionError(f"netstorm broadcasts from rank 0 (its INIT carries the "
                                f"value), not root_rank={root_rank}")


def _digest(layout: list) -> np.ndarray:
    """A layout (``[(name, shape, dtype)]``) as four int64 words of its SHA-256."""
    text = repr([(n, tuple(s), str(d)) for n, s, d in layout]).encode()
    return np.frombuffer(hashlib.sha256(text).digest(), dtype=np.int64).copy()


def _received(session: Session, key: int, value: np.ndarray) -> np.ndarray:
    """``value`` through one fresh key: rank 0's is what every worker gets back."""
    client = session.client
    client.init(key, value)
    out = np.empty(value.size, value.dtype)
    client.finish_into(key, client.start_pull(key), out)
    return out


def broadcast_tensors(named_tensors, session: Session, root_rank: int = 0) -> None:
    """Overwrite every tensor of ``named_tensors`` (``[(name, tensor)]`` or a dict) with
    rank 0's, in place. Blocks until done (bounded by the cluster's ``timeout_s``)."""
    _check_root(root_rank)
    items = list(named_tensors.items() if isinstance(named_tensors, dict) else named_tensors)
    layout = [(name, tuple(t.shape), numpy_dtype(t, f"tensor {name!r}")) for name, t in items]
    dtypes = sorted({d.str for _, _, d in layout})
    keys = session.new_keys(1 + len(dtypes))
    mine = _digest(layout)
    theirs = _received(session, keys[0], mine)
    if not np.array_equal(theirs, mine):
        raise TorchSessionError(
            f"broadcast: rank {session.rank}'s tensors differ from rank 0's (names, shapes or "
            f"dtypes); every worker must broadcast the same model and optimizer "
            f"({len(items)} tensors here)")
    for key, dtype in zip(keys[1:], dtypes):
        group = [(name, t) for (name, t), (_, _, d) in zip(items, layout) if d.str == dtype]
        views = [flat_view(t, f"tensor {name!r}") for name, t in group]
        packed = np.concatenate([v for v, _ in views]) if views else np.empty(0, dtype)
        value = _received(session, key, packed)
        at = 0
        for (_, tensor), (view, in_place) in zip(group, views):
            view[:] = value[at:at + view.size]
            at += view.size
            write_back(tensor, view, in_place)


def broadcast_parameters(params, session: Session, root_rank: int = 0) -> None:
    """Rank 0's parameters (and buffers) everywhere: ``params`` is ``model.state_dict()``
    or ``model.named_parameters()``. In place; blocks until done."""
    if isinstance(params, dict):
        items = list(params.items())
    else:
        items = list(params)
    with torch.no_grad():
        broadcast_tensors(items, session, root_rank)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, session: Session,
                              root_rank: int = 0) -> None:
    """Rank 0's optimizer state everywhere: every tensor of its per-parameter state
    (momentum buffers, Adam's moments and step) and every number of its parameter groups
    (lr, momentum, ...). An optimizer that has not stepped yet has no per-parameter state:
    then only the groups' numbers travel. Every worker's optimizer must have the same
    structure."""
    _check_root(root_rank)
    state = optimizer.state_dict()
    named = []
    for index, group in enumerate(state["param_groups"]):
        for option in sorted(group):
            value = group[option]
            if isinstance(value, numbers.Number) and not isinstance(value, bool):
                named.append((f"param_groups.{index}.{option}",
                              torch.tensor([float(value)], dtype=torch.float64)))
    for param in sorted(state["state"]):
        for name in sorted(state["state"][param]):
            value = state["state"][param][name]
            if isinstance(value, torch.Tensor):
                named.append((f"state.{param}.{name}", value))
            elif isinstance(value, numbers.Number) and not isinstance(value, bool):
                named.append((f"state.{param}.{name}",
                              torch.tensor([float(value)], dtype=torch.float64)))
    with torch.no_grad():
        broadcast_tensors(named, session, root_rank)
    for name, tensor in named:      # numbers back into the state dict, then load it
        where, *path, option = name.split(".")
        holder = state["param_groups"][int(path[0])] if where == "param_groups" else \
            state["state"][int(path[0])]
        if not isinstance(holder[option], torch.Tensor):
            kind = type(holder[option])
            holder[option] = kind(tensor.item())
    optimizer.load_state_dict(state)
