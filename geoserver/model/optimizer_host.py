"""Server-side optimizer: built from a JSON spec, never from a pickle received on the wire.

Workers describe their MXNet optimizer with :func:`optimizer_spec` (class name plus its plain
attributes); each DC's server builds the same optimizer with :class:`OptimizerHost` and
applies it to its replica of the weights. Every DC receives bit-identical summed gradients,
so every replica stays bit-identical and moving a chunk's root never moves optimizer state.
mxnet is imported only when an optimizer is actually set: moving and summing tensors does
not need it.
"""
from __future__ import annotations

import numbers
import threading
from concurrent.futures import Future

import numpy as np

__all__ = ["OptimizerHost", "OptimizerSpecError", "SKIP_ATTRS", "build_in_background",
           "optimizer_spec", "states_from_wire", "states_to_wire"]

SKIP_ATTRS = {"param_dict", "lr_scheduler", "lr_mult", "wd_mult", "idx2name", "sym_info",
              "_index_update_count", "_all_index_update_counts", "num_update"}


class OptimizerSpecError(ValueError):
    """The optimizer cannot be described to, or rebuilt on, the servers."""


def _plain(value) -> bool:
    if isinstance(value, (bool, str)) or value is None:
        return True
    if isinstance(value, numbers.Number):
        return np.isfinite(value) if isinstance(value, float) else True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return False


def _int_dict(mapping) -> list:
    return [[int(k), v] for k, v in mapping.items() if isinstance(k, (int, np.integer))]


def optimizer_spec(optimizer) -> dict:
    """Describe an ``mx.optimizer.Optimizer`` as JSON-able data (worker side)."""
    cls = type(optimizer)
    if not cls.__module__.startswith("mxnet."):
        raise OptimizerSpecError(
            f"optimizer {cls.__module__}.{cls.__name__} is not one of MXNet's built-in "
            f"optimizers, so netstorm's servers cannot rebuild it; use "
            f"update_on_kvstore=False to apply it on the workers")
    attrs = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(optimizer).items()
             if k not in SKIP_ATTRS and _plain(v)}
    lr_mult = {i: p.lr_mult for i, p in optimizer.param_dict.items()}
    wd_mult = {i: p.wd_mult for i, p in optimizer.param_dict.items()}
    lr_mult.update({k: v for k, v in optimizer.lr_mult.items() if isinstance(k, int)})
    wd_mult.update({k: v for k, v in optimizer.wd_mult.items() if isinstance(k, int)})
    spec = {"name": cls.__name__.lower(), "attrs": attrs, "lr_mult": _int_dict(lr_mult),
            "wd_mult": _int_dict(wd_mult),
            "named_lr_mult": {k: v for k, v in optimizer.lr_mult.items() if isinstance(k, str)},
            "named_wd_mult": {k: v for k, v in optimizer.wd_mult.items() if isinstance(k, str)},
            "idx2name": _int_dict(optimizer.idx2name), "lr_scheduler": None}
    sched = optimizer.lr_scheduler
    if sched is not None:
        scls = type(sched)
        if not scls.__module__.startswith("mxnet."):
            raise OptimizerSpecError(f"lr_scheduler {scls.__name__} is not MXNet's own; use "
                                     f"update_on_kvstore=False")
        spec["lr_scheduler"] = {"name": scls.__name__,
                                "attrs": {k: v for k, v in vars(sched).items() if _plain(v)}}
    return spec


def _to_frames(state, frames: list):
    """Nested optimizer state -> JSON structure, appending arrays to ``frames``."""
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return {"seq": [_to_frames(s, frames) for s in state]}
    if isinstance(state, numbers.Number):
        return {"num": state}
    array = state.asnumpy() if hasattr(state, "asnumpy") else np.asarray(state)
    frames.append(np.ascontiguousarray(array).view(np.uint8).reshape(-1))
    return {"frame": len(frames) - 1, "shape": list(array.shape), "dtype": str(array.dtype)}


def _from_frames(node, frames, make_array):
    if node is None:
        return None
    if "seq" in node:
        return tuple(_from_frames(n, frames, make_array) for n in node["seq"])
    if "num" in node:
        return node["num"]
    raw = np.frombuffer(frames[int(node["frame"])], dtype=np.uint8)
    return make_array(raw.view(np.dtype(node["dtype"])).reshape(node["shape"]))


def states_to_wire(states: dict, counts: dict, num_update: int):
    """Optimizer states -> (meta, frames) with no pickle: arrays become raw frames."""
    frames: list = []
    structure = [[int(k), _to_frames(v, frames)] for k, v in states.items()]
    return {"states": structure, "counts": _int_dict(counts), "num_update": int(num_update)}, \
        frames


def states_from_wire(meta: dict, frames, make_array):
    try:
        states = {int(k): _from_frames(v, frames, make_array) for k, v in meta["states"]}
        counts = {int(k): int(v) for k, v in meta["counts"]}
        return states, counts, int(meta["num_update"])
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise OptimizerSpecError(f"malformed optimizer states: {exc!r}") from exc


def build_in_background(build, spec) -> Future:
    """``build(spec)`` on a thread of its own (a daemon: a stopping server does not wait
    for it): the future holds what it returned or the exception it raised."""
    future: Future = Future()

    def run():
        try:
            future.set_result(build(spec))
        except BaseException as exc:    # noqa: BLE001 - handed to whoever takes the result
            future.set_exception(exc)
    threading.Thread(target=run, daemon=True, name="build-optimizer").start()
    return future


class OptimizerHost:
    """Applies one MXNet optimizer to the server's replica of the weights."""

    def __init__(self, spec: dict):
        import mxnet as mx  # noqa: PLC0415 - only servers with an optimizer need mxnet
        self._mx = mx
        try:
            name = spec["name"]
            optimizer = mx.optimizer.create(name)
        except (KeyError, TypeError, ValueError) as exc:
            raise OptimizerSpecError(f"cannot build optimizer from spec: {exc}") from exc
        try:
            for key, value in spec["attrs"].items():
                setattr(optimizer, key, value)
            optimizer.lr_mult = {int(k): v for k, v in spec["lr_mult"]}
            optimizer.lr_mult.update(spec["named_lr_mult"])
            optimizer.wd_mult = {int(k): v for k, v in spec["wd_mult"]}
            optimizer.wd_mult.update(spec["named_wd_mult"])
            optimizer.idx2name = {int(k): v for k, v in spec["idx2name"]}
            sched = spec["lr_scheduler"]
            if sched is not None:
                scls = getattr(mx.lr_scheduler, sched["name"], None)
                if not isinstance(scls, type) or not issubclass(scls,
                                                               mx.lr_scheduler.LRScheduler):
                    raise OptimizerSpecError(f"unknown lr_scheduler {sched['name']!r}")
                scheduler = scls.__new__(scls)
                scheduler.__dict__.update(sched["attrs"])
                optimizer.lr_scheduler = scheduler
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise OptimizerSpecError(f"malformed optimizer spec: {exc!r}") from exc
        if isinstance(optimizer, mx.optimizer.DCASGD) and optimizer.momentum:
            raise OptimizerSpecError(
                f"DCASGD with momentum={optimizer.momentum:g} cannot run in MXNet 1.9.1 (its "
                f"update tests the truth value of a whole NDArray, which raises); use "
                f"momentum=0")
        self.name = name
        self.updater = mx.optimizer.get_updater(optimizer)

    def update(self, index: int, grad: np.ndarray, weight: np.ndarray,
               computed_on: np.ndarray | None = None, sparse: bool = False) -> np.ndarray:
        """The new weight after one optimizer step (a new array; inputs are untouched).
        ``computed_on``: the weights ``grad`` was computed on; MXNet's DCASGD compensates
        the delay against them (its ``previous_weight`` state is set to them first); other
        optimizers ignore it. ``sparse``: ``grad`` is a sum of row_sparse gradients, given
        to the optimizer as row_sparse (its rows that are not all zero), so that a lazy
        update (MXNet's default for SGD, Adam, ...) touches only those rows, as on
        MXNet's own servers."""
        nd = self._mx.nd
        w = nd.array(weight, dtype=weight.dtype)
        if computed_on is not None and isinstance(self.updater.optimizer,
                                                  self._mx.optimizer.DCASGD):
            if index not in self.updater.states:
                self.updater.states[index] = \
                    self.updater.optimizer.create_state_multi_precision(index, w)
                self.updater.states_synced[index] = True
            self.updater.states[index][1][:] = nd.array(computed_on, dtype=weight.dtype)
        g = nd.array(grad, dtype=grad.dtype)
        self.updater(index, g.tostype("row_sparse") if sparse and g.ndim else g, w)
        return w.asnumpy().reshape(-1)

    def dump_states(self):
        opt = self.updater.optimizer
        return states_to_wire(self.updater.states, opt._index_update_count, opt.num_update)

    def key_states(self, keys) -> tuple:
        """``(states, counts, num_update)`` of ``keys`` only (for a peer's replica)."""
        opt = self.updater.optimizer
        return ({k: self.updater.states[k] for k in keys if k in self.updater.states},
                {k: opt._index_update_count[k] for k in keys
                 if k in opt._index_update_count}, opt.num_update)

    def merge_states(self, meta: dict, frames, keys) -> None:
        """Take ``keys``' states and update counts from a peer's replica (the keys it has
        none for have none here either); the other keys keep theirs."""
        nd = self._mx.nd
        states, counts, num_update = states_from_wire(
            meta, frames, lambda a: nd.array(a, dtype=a.dtype))
        opt = self.updater.optimizer
        for key in keys:
            self.updater.states.pop(key, None)
            self.updater.states_synced.pop(key, None)
            opt._index_update_count.pop(key, None)
        for key, state in states.items():
            self.updater.states[key] = state
            self.updater.states_synced[key] = False
        opt._index_update_count.update(counts)
        opt.num_update = max(opt.num_update, num_update)

    def load_states(self, meta: dict, frames) -> None:
        nd = self._mx.nd
        states, counts, num_update = states_from_wire(
            meta, frames, lambda a: nd.array(a, dtype=a.dtype))
        self.updater.states = states
        self.updater.states_synced = dict.fromkeys(states, False)
        self.updater.optimizer._all_index_update_counts = {0: counts}
        self.updater.optimizer._index_update_count = counts
        self.updater.optimizer.num_update = num_update
