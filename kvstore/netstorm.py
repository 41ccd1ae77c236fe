"""``NetStorm``: the MXNet KVStore API mapped onto netstorm's worker client.

Thin by design: argument normalisation here, protocol in :mod:`netstorm.geoserver.worker_client`,
asynchrony in :mod:`netstorm.kvstore.engine_ops`.

``type`` is ``'dist_sync_netstorm'``: it contains ``'dist'`` and ``'_sync'`` on purpose, so
gluon.Trainer and Module treat netstorm exactly as ``dist_sync`` (Module multiplies the batch
size by ``num_workers`` for ``rescale_grad``; Trainer updates on the kvstore by default and
refuses to reset a distributed store).
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import uuid

import mxnet as mx
import numpy as np
from mxnet.kvstore import KVStoreBase

from netstorm.geoserver.cli import read_stop_note
from netstorm.geoserver.compression import CompressionConfig, CompressionError
from netstorm.geoserver.optimizer_host import optimizer_spec, states_from_wire, states_to_wire
from netstorm.geoserver.worker_client import KVStoreError, WorkerClient, WorkerSettings

from . import engine_ops
from .local_steps import LocalSteps

MAX_KEY = 2 ** 32 - 1


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _group(keys, values, name: str):
    """Normalise (key, value) arguments to [(key, [NDArray, ...]), ...] like MXNet does."""
    if isinstance(keys, (list, tuple)):
        if not isinstance(values, (list, tuple)) or len(values) != len(keys):
            raise ValueError(f"{name}: {len(keys)} keys need a list of {len(keys)} values")
        return [(k, _as_list(v)) for k, v in zip(keys, values)]
    return [(keys, _as_list(values))]


def _check_dense(arrays, what: str) -> None:
    for a in arrays:
        if not isinstance(a, mx.nd.NDArray):
            raise TypeError(f"{what}: expected mxnet NDArray, got {type(a).__name__}")
        if a.stype != "default":
            raise ValueError(f"{what}: netstorm supports dense arrays only, got {a.stype}")


@KVStoreBase.register
class NetStorm(KVStoreBase):
    """Hierarchical WAN parameter server with dist_sync semantics (``kvstore='netstorm'``)."""

    created = 0     # stores made in this process (MXNet's server profiling is refused then)

    def __init__(self, settings: WorkerSettings | None = None):
        settings = settings or WorkerSettings.from_env(os.environ)
        self._client = WorkerClient(settings)
        NetStorm.created += 1
        self._token = uuid.uuid4().hex
        engine_ops.attach(self._token, self._client)
        self._ids: dict = {}
        self._key_kind = None
        self._tokens: dict = {}
        self._updater = None
        # hfa / esync: the optimizer runs here, on the worker's own weights
        self._local = LocalSteps(self._client.sync, self._client, self._push_value) \
            if self._client.sync.local_steps else None
        self._failed = False
        self._stopped_by = ""
        self._previous_hook = sys.excepthook
        sys.excepthook = self._excepthook
        self._stop_on_sigterm(settings.run_dir)
        atexit.register(self.close)

    # ------------------------------------------------------------ identity
    @property
    def type(self):
        return "dist_sync_netstorm"

    @property
    def rank(self):
        return self._client.me.rank

    @property
    def local_rank(self):
        """Rank of this worker within its DC."""
        return self._client.me.local_rank

    @property
    def num_workers(self):
        return self._client.num_workers

    @property
    def dc(self):
        return self._client.me.dc

    @property
    def sync_mode(self) -> str:
        """The cluster's synchronization mode: fsa, hfa, mixed or esync (docs/sync.md)."""
        return self._client.sync.mode

    @staticmethod
    def is_capable(capability):
        return capability.lower() == KVStoreBase.OPTIMIZER

    # ------------------------------------------------------------ keys
    def _key_id(self, key, create: bool = False) -> int:
        kind = "str" if isinstance(key, str) else "int"
        if kind == "int" and not (isinstance(key, int) and 0 <= key <= MAX_KEY):
            raise ValueError(f"netstorm keys are str or int in 0..{MAX_KEY}, got {key!r}")
        if self._key_kind not in (None, kind):
            raise ValueError(f"netstorm keys must all be str or all int; got {key!r} after "
                             f"{self._key_kind} keys")
        self._key_kind = kind
        if kind == "int":
            return key
        if key not in self._ids:
            if not create:
                raise KVStoreError(f"key {key!r} has not been initialized (call init first)")
            self._ids[key] = len(self._ids)   # str keys number in init order, as in MXNet
        return self._ids[key]

    def _declared(self, key, arrays) -> int:
        """Key id of an initialized key whose shape matches ``arrays`` (checked here, at the
        call, so bad input raises in the caller's thread rather than in the engine)."""
        kid = self._key_id(key)
        info = self._client.keys.get(kid)
        if info is None:
            raise KVStoreError(f"key {key!r} has not been initialized (call init first)")
        for a in arrays:
            if tuple(a.shape) != info.shape or np.dtype(a.dtype) != info.dtype:
                raise ValueError(f"key {key!r} is {info.shape} {info.dtype}; got an array "
                                 f"of {tuple(a.shape)} {np.dtype(a.dtype)}")
        return kid

    def _token_of(self, key_id: int):
        token = self._tokens.get(key_id)
        if token is None:
            token = self._tokens[key_id] = mx.nd.zeros((1,))
        return token

    # ------------------------------------------------------------ data path
    def init(self, key, value):
        for k, vals in _group(key, value, "init"):
            _check_dense(vals, f"init of key {k!r}")
            kid = self._key_id(k, create=True)
            self._client.init(kid, vals[0].asnumpy())
            if self._local is not None:     # its weights start from the servers' value
                start = np.empty(vals[0].size, dtype=vals[0].dtype)
                self._client.finish_into(kid, self._client.start_pull(kid), start)
                self._local.start(kid, mx.nd.array(start.reshape(vals[0].shape),
                                                   dtype=vals[0].dtype))

    def _push_value(self, kid: int, delta):
        """Push ``delta`` as the key's next round; an NDArray that gets the value after it."""
        return mx.nd.Custom(delta, self._token_of(kid), op_type="netstorm_pushpull",
                            store=self._token, key=str(kid), want_value="1")

    def broadcast(self, key, value, out, priority=0):
        self.init(key, value)
        self.pull(key, out=out, priority=priority)

    def _summed(self, vals):
        return vals[0] if len(vals) == 1 else mx.nd.add_n(*vals)

    def push(self, key, value, priority=0):
        for k, vals in _group(key, value, "push"):
            _check_dense(vals, f"push of key {k!r}")
            kid = self._declared(k, vals)
            if self._local is not None:
                self._local.step(kid, self._summed(vals))
                continue
            mx.nd.Custom(self._summed(vals), self._token_of(kid), op_type="netstorm_pushpull",
                         store=self._token, key=str(kid), want_value="0")

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        if out is None:
            raise ValueError("pull needs out=")
        for k, outs in _group(key, out, "pull"):
            _check_dense(outs, f"pull of key {k!r}")
            kid = self._declared(k, outs)
            if self._local is not None:
                self._local.pull(kid, outs)
                continue
            value = mx.nd.Custom(outs[0], self._token_of(kid), op_type="netstorm_pull",
                                 store=self._token, key=str(kid))
            for o in outs:
                value.copyto(o)

    def pushpull(self, key, value, out=None, priority=0):
        groups = _group(key, value, "pushpull")
        outs = [vals for _, vals in groups] if out is None else \
            [o for _, o in _group(key, out, "pushpull out")]
        for (k, vals), targets in zip(groups, outs):
            _check_dense(vals + targets, f"pushpull of key {k!r}")
            kid = self._declared(k, vals + targets)
            if self._local is not None:
                self._local.step(kid, self._summed(vals), targets)
                continue
            # the operator writes the first target directly (it may alias the gradient)
            mx.nd.Custom(self._summed(vals), self._token_of(kid), op_type="netstorm_pushpull",
                         store=self._token, key=str(kid), want_value="1", out=targets[0])
            for o in targets[1:]:
                targets[0].copyto(o)

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        raise NotImplementedError("netstorm does not support sparse arrays (row_sparse_pull)")

    def barrier(self):
        if self.sync_mode == "esync" and self._local.keys and \
                any(local.rounds for local in self._local.keys.values()):
            raise KVStoreError("barrier: under sync mode 'esync' workers run different "
                               "numbers of rounds, so once training started a barrier would "
                               "wait for rounds that never come; call it before the first "
                               "step only (a worker that finishes just closes the store)")
        mx.nd.waitall()
        self._client.barrier()

    # ------------------------------------------------------------ options
    def set_gradient_compression(self, compression_params):
        """Accepted when it names the compression the cluster runs with (one setting is in
        force cluster-wide, from the cluster file's ``[compression]``); anything else is a
        clear error, never a silent mismatch."""
        wanted = CompressionConfig.from_params(compression_params)
        in_force = self._client.compression
        if wanted != in_force:
            raise CompressionError(
                f"this cluster runs with compression {in_force.to_params()}, the script asks "
                f"for {wanted.to_params()}: one setting is in force cluster-wide; set it in "
                f"the cluster file's [compression] table (docs/compression.md)")

    def set_optimizer(self, optimizer):
        if self._local is not None:     # hfa / esync: the servers take no optimizer
            self._local.set_optimizer(optimizer)
            self._updater = self._local.updater
            return
        self._client.set_optimizer(optimizer_spec(optimizer))
        self._updater = mx.optimizer.get_updater(optimizer)

    def save_optimizer_states(self, fname, dump_optimizer=False):
        if self._local is not None:
            mx.nd.waitall()
            with open(fname, "wb") as f:
                f.write(self._local.save_states(dump_optimizer))
            return
        if self._updater is None:
            raise KVStoreError("save_optimizer_states: no optimizer set (set_optimizer)")
        mx.nd.waitall()
        reply = self._client.save_states()
        states, counts, num_update = states_from_wire(reply.meta, reply.frames,
                                                      lambda a: mx.nd.array(a, dtype=a.dtype))
        self._updater.states = states
        self._updater.states_synced = dict.fromkeys(states, True)
        optimizer = self._updater.optimizer
        optimizer._all_index_update_counts = {0: counts}
        optimizer._index_update_count = counts
        optimizer.num_update = num_update
        with open(fname, "wb") as f:
            f.write(self._updater.get_states(dump_optimizer))

    def load_optimizer_states(self, fname):
        if self._local is not None:
            mx.nd.waitall()
            with open(fname, "rb") as f:    # the user's own file, in MXNet's format
                self._local.load_states(f.read())
            return
        if self._updater is None:
            raise KVStoreError("load_optimizer_states: no optimizer set (set_optimizer)")
        mx.nd.waitall()
        with open(fname, "rb") as f:   # the user's own file, in MXNet's format
            self._updater.set_states(f.read())
        optimizer = self._updater.optimizer
        self._client.set_optimizer(optimizer_spec(optimizer))
        meta, frames = states_to_wire(self._updater.states, optimizer._index_update_count,
                                      optimizer.num_update)
        self._client.load_states(meta, frames)

    # ------------------------------------------------------------ lifecycle
    def _stop_on_sigterm(self, run_dir: str) -> None:
        """Under the launcher (``run_dir`` set), SIGTERM - the launcher stopping this DC
        because one of its processes failed - ends the script through ``SystemExit``, and
        the scheduler hears why, with the launcher's reason, instead of this worker just
        falling silent (and being named as the one that died). A script's own SIGTERM
        handler is left alone."""
        if not run_dir or threading.current_thread() is not threading.main_thread() or \
                signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def on_sigterm(signum, _frame):
            note = read_stop_note(run_dir)
            self._stopped_by = "stopped by SIGTERM" + (
                f" from its launcher, after: {note}" if note else "")
            self._failed = True
            self._client.caused_by_other = bool(note)
            raise SystemExit(128 + signum)
        signal.signal(signal.SIGTERM, on_sigterm)

    def _excepthook(self, etype, value, tb):
        """The script died: report why to the scheduler (which stops the others naming this
        worker): for MXNet's wrapper of an engine operator's failure, netstorm's own reason."""
        self._failed = True
        self._previous_hook(etype, value, tb)
        wrapped = issubclass(etype, mx.base.MXNetError) and self._client.last_error
        self.close(clean=False, reason=wrapped or f"{etype.__name__}: {value}")

    def close(self, clean: bool | None = None, reason: str = ""):
        """Tell the scheduler this worker is done (or failed), close its sockets and put
        back the ``sys.excepthook`` it replaced (unless another has replaced it since)."""
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_hook
        if clean is None:
            clean = not self._failed
        reason = reason or self._stopped_by
        if clean:
            try:
                mx.nd.waitall()
            except mx.base.MXNetError:
                clean = False
        self._client.close(clean=clean, reason=reason)
