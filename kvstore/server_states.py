"""What the DC servers hold, written to and read from files by a worker: a checkpoint of
every key's value with the optimizer and its states (:func:`save_checkpoint`,
docs/recovery.md), and the optimizer states in MXNet's own format
(:func:`save_optimizer_states`, :func:`load_optimizer_states`, as ``gluon.Trainer``'s
``save_states`` and ``load_states`` call them). Used by
:class:`~netstorm.kvstore.netstorm.NetStorm` when the servers run the optimizer (sync mode
``fsa``); the local-steps modes keep their states on the worker (``local_steps``). Each is
one round trip per key (all pulls in flight at once) or one for the states.
"""
from __future__ import annotations

import mxnet as mx
import numpy as np

from netstorm.geoserver.model import checkpoint
from netstorm.geoserver.model.optimizer_host import optimizer_spec, states_from_wire, \
    states_to_wire
from netstorm.geoserver.worker.client import KVStoreError

__all__ = ["load_optimizer_states", "save_checkpoint", "save_optimizer_states"]


def save_checkpoint(client, fname: str, updater, spec, sparse) -> int:
    """Write every key's value, and with an ``updater`` the servers' optimizer (``spec``)
    and its states, from this DC's replica to ``fname``; ``sparse``: the keys initialized
    row_sparse. Returns the round it holds."""
    mx.nd.waitall()
    rounds = {info.pushes for info in client.keys.values()}
    if len(rounds) > 1:
        raise KVStoreError(f"save_checkpoint: keys are at different rounds "
                           f"({min(rounds)}..{max(rounds)}): call it between two steps")
    pulls = {kid: client.start_pull(kid) for kid in client.keys}    # all in flight
    values = {}
    for kid, info in client.keys.items():
        values[kid] = np.empty(int(np.prod(info.shape)), dtype=info.dtype)
        client.finish_into(kid, pulls[kid], values[kid])
        values[kid] = values[kid].reshape(info.shape)
    meta, frames, written_spec = None, [], None
    if updater is not None:
        reply = client.save_states()
        meta, frames, written_spec = reply.meta, reply.frames, spec
    done = client.resume_base + (rounds.pop() if rounds else 0)
    checkpoint.write(fname, checkpoint.Checkpoint(done, values, frozenset(sparse),
                                                  written_spec, meta, frames))
    return done


def save_optimizer_states(client, updater, fname: str, dump_optimizer: bool) -> None:
    """The servers' optimizer states, fetched into ``updater`` and written to ``fname`` in
    MXNet's format."""
    if updater is None:
        raise KVStoreError("save_optimizer_states: no optimizer set (set_optimizer)")
    mx.nd.waitall()
    reply = client.save_states()
    states, counts, num_update = states_from_wire(reply.meta, reply.frames,
                                                  lambda a: mx.nd.array(a, dtype=a.dtype))
    updater.states = states
    updater.states_synced = dict.fromkeys(states, True)
    optimizer = updater.optimizer
    optimizer._all_index_update_counts = {0: counts}
    optimizer._index_update_count = counts
    optimizer.num_update = num_update
    with open(fname, "wb") as f:
        f.write(updater.get_states(dump_optimizer))


def load_optimizer_states(client, updater, fname: str):
    """The states in ``fname`` (MXNet's format) loaded into ``updater`` and sent to the
    servers with its optimizer; returns that optimizer's spec, as sent."""
    if updater is None:
        raise KVStoreError("load_optimizer_states: no optimizer set (set_optimizer)")
    mx.nd.waitall()
    with open(fname, "rb") as f:   # the user's own file, in MXNet's format
        updater.set_states(f.read())
    optimizer = updater.optimizer
    spec = optimizer_spec(optimizer)
    client.set_optimizer(spec)
    meta, frames = states_to_wire(updater.states, optimizer._index_update_count,
                                  optimizer.num_update)
    client.load_states(meta, frames)
    return spec
