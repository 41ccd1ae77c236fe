"""``row_sparse_pull``: the rows a script asks for of each key's value, as row_sparse
arrays (MXNet's semantics: one ``row_ids`` array per output, or one for all the outputs of
a key). The value travels dense (docs/kvstore.md): it is pulled whole, then the rows are
taken here, O(rows · row size) per output after the pull.
"""
from __future__ import annotations

import mxnet as mx
import numpy as np

from .arguments import as_list, check_arrays, group

__all__ = ["retained", "row_sparse_pull"]


def row_sparse_pull(key, out, row_ids, declared, pull) -> None:
    """The rows ``row_ids`` (any order, repeats allowed) of each key's value into the
    row_sparse ``out``; ``declared(key, arrays, any_dtype)`` checks a key and its arrays,
    ``pull(key, out=...)`` pulls a key's dense value."""
    if out is None or row_ids is None:
        raise ValueError("row_sparse_pull needs out= and row_ids=")
    single_key = not isinstance(key, (list, tuple))
    ids = [row_ids] if single_key else row_ids
    groups = group(key, out, "row_sparse_pull")
    if not isinstance(ids, (list, tuple)) or len(ids) != len(groups):
        raise ValueError(f"row_sparse_pull: {len(groups)} key(s) need as many row_ids")
    for (k, outs), rows in zip(groups, ids):
        rows = as_list(rows)
        rows = rows * len(outs) if len(rows) == 1 else rows
        if len(rows) != len(outs):
            raise ValueError(f"row_sparse_pull of key {k!r}: {len(outs)} outputs, "
                             f"{len(rows)} row_ids")
        check_arrays(outs + rows, f"row_sparse_pull of key {k!r}")
        if any(o.stype != "row_sparse" for o in outs):
            raise ValueError(f"row_sparse_pull of key {k!r}: out must be row_sparse")
        declared(k, outs, any_dtype=True)
        with mx.autograd.pause():   # gluon pulls rows inside autograd.record()
            value = mx.nd.zeros(outs[0].shape, dtype=outs[0].dtype)
            pull(k, out=value)
            for o, wanted in zip(outs, rows):
                retained(value, wanted, k).copyto(o)


def retained(value, row_ids, key):
    """The rows ``row_ids`` of the dense ``value`` as a row_sparse array."""
    rows = np.unique(row_ids.asnumpy().astype(np.int64))
    if rows.size and (rows[0] < 0 or rows[-1] >= value.shape[0]):
        raise ValueError(f"row_sparse_pull of key {key!r}: row ids must be in "
                         f"0..{value.shape[0] - 1}, got {rows[0]}..{rows[-1]}")
    if not rows.size:
        return mx.nd.sparse.zeros("row_sparse", value.shape, dtype=value.dtype)
    taken = mx.nd.take(value, mx.nd.array(rows, dtype="int64"))
    return mx.nd.sparse.row_sparse_array((taken, rows), shape=value.shape,
                                         dtype=value.dtype)
