"""``NetStorm``: the MXNet KVStore API mapped onto netstorm's worker client.

Thin by design: the API's semantics here, argument normalisation in
:mod:`netstorm.kvstore.arguments`, key ids in :mod:`netstorm.kvstore.key_ids`, protocol in
:mod:`netstorm.geoserver.worker.client`, engine operations in
:mod:`netstorm.kvstore.key_ops`, ``row_sparse_pull`` in :mod:`netstorm.kvstore.row_sparse`,
checkpoints and the servers' optimizer states in :mod:`netstorm.kvstore.server_states`.

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
from dataclasses import replace

import mxnet as mx
import numpy as np
from mxnet.kvstore import KVStore, KVStoreBase

from netstorm.geoserver.config.exit_reasons import read_stop_note
from netstorm.geoserver.config.compression import CompressionConfig, CompressionError
from netstorm.geoserver.model.optimizer_host import optimizer_spec
from netstorm.geoserver.worker.client import KVStoreError, WorkerClient, WorkerSettings

from . import engine_ops
from .arguments import ArgumentChecks, check_arrays, dense, group, sparse_outs
from .key_ids import MAX_KEY, KeyIds, UninitializedKey
from .key_ops import key_operations
from .local_steps import LocalSteps, resumed_steps
from .row_sparse import row_sparse_pull
from .server_states import load_optimizer_states, save_checkpoint, save_optimizer_states
from .sigterm import stop_on_sigterm

__all__ = ["MAX_KEY", "NetStorm", "UninitializedKey"]


@KVStoreBase.register
class NetStorm(KVStore):
    """Hierarchical WAN parameter server with dist_sync semantics (``kvstore='netstorm'``).

    A :class:`mxnet.kvstore.KVStore` without a native handle: MXNet 1.9.1's gluon.Trainer
    takes only that class (not any ``KVStoreBase``) for sparse weights and gradients, so
    every method of it is defined here; none reaches MXNet's C store."""

    created = 0     # stores made in this process (MXNet's server profiling is refused then)
    handle = None   # no native store behind this one
    _is_p3 = False
    _updater_func = _str_updater_func = None

    def __init__(self, settings: WorkerSettings | None = None):
        settings = settings or WorkerSettings.from_env(os.environ)
        self._client = WorkerClient(settings)
        NetStorm.created += 1
        self._token = uuid.uuid4().hex
        engine_ops.attach(self._token, self._client)
        self._keys = KeyIds(self._client)
        self._tokens: dict = {}
        self._ops = key_operations(self._client, self._token)
        self._checked = ArgumentChecks()
        self._sparse: set = set()       # keys initialized row_sparse
        self._updater = None
        self._spec = None               # the servers' optimizer, as sent
        # hfa / esync / diloco: the optimizer runs here, on the worker's own weights
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
    def resumed_round(self) -> int:
        """0, or for a worker restarted into its rank (``[recovery] worker_restarts``), the
        rounds its lost process had completed: under fsa its steps, the batches to skip to
        go on exactly where it stopped (docs/recovery.md); in every mode see
        :attr:`resumed_step`."""
        return self._client.resumed_round

    @property
    def resumed_step(self) -> int:
        """0, or for a worker restarted into its rank, the optimizer steps (batches) to
        skip: :attr:`resumed_round` under fsa (a step is a round); under diloco and hfa
        that many synchronizations x ``h`` / ``k1`` steps each: the restarted worker goes
        on from its rank's last synchronization (docs/recovery-localrestart.md)."""
        return resumed_steps(self._client.sync, self._client.resumed_round) \
            if self._local is not None else self._client.resumed_round

    @property
    def sync_mode(self) -> str:
        """The cluster's synchronization mode: fsa, hfa, mixed, esync or diloco (docs/sync.md)."""
        return self._client.sync.mode

    @staticmethod
    def is_capable(capability):
        return capability.lower() == KVStoreBase.OPTIMIZER

    # ------------------------------------------------------------ keys
    def _token_of(self, key_id: int):
        token = self._tokens.get(key_id)
        if token is None:
            token = self._tokens[key_id] = mx.nd.zeros((1,))
        return token

    # ------------------------------------------------------------ data path
    def init(self, key, value):
        for k, vals in group(key, value, "init"):
            check_arrays(vals, f"init of key {k!r}")
            kid = self._keys.id(k, create=True)
            self._client.init(kid, dense(vals[0]).asnumpy(),
                              sparse=vals[0].stype == "row_sparse")
            if vals[0].stype == "row_sparse":
                self._sparse.add(kid)
            if self._local is not None:     # its weights start from the servers' value
                start = np.empty(vals[0].size, dtype=vals[0].dtype)
                self._client.finish_into(kid, self._client.start_pull(kid), start)
                self._local.start(kid, mx.nd.array(start.reshape(vals[0].shape),
                                                   dtype=vals[0].dtype),
                                  rounds=self._client.keys[kid].pushes)

    def _push_value(self, kid: int, delta):
        """Push ``delta`` as the key's next round; an NDArray that gets the value after it."""
        value = mx.nd.empty(delta.shape, dtype=delta.dtype, ctx=delta.context)
        self._ops.pushpull(kid, delta, value, self._token_of(kid), fresh_out=True)
        return value

    def broadcast(self, key, value, out, priority=0):
        self.init(key, value)
        self.pull(key, out=out, priority=priority)

    def _summed(self, vals):
        vals = [dense(v) for v in vals]
        return vals[0] if len(vals) == 1 else mx.nd.add_n(*vals)

    def push(self, key, value, priority=0):
        for k, vals in group(key, value, "push"):
            kid, all_dense = self._checked.once("push", k, vals,
                                                lambda: self._push_checks(k, vals))
            if self._local is not None:
                self._local.step(kid, self._summed(vals))
                continue
            summed = vals[0] if all_dense and len(vals) == 1 else self._summed(vals)
            self._ops.push(kid, summed, self._token_of(kid), priority)

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        if out is None:
            raise ValueError("pull needs out=")
        method = "pull" if ignore_sparse else "pull, row_sparse outputs refused"
        for k, given in group(key, out, "pull"):
            kid, outs, direct = self._checked.once(
                method, k, given, lambda: self._pull_checks(k, given, ignore_sparse))
            if not outs:
                continue
            if self._local is not None:
                self._local.pull(kid, outs)
                continue
            # the operation writes the first output when it has the key's dtype
            value = outs[0] if direct else mx.nd.empty(
                outs[0].shape, dtype=self._client.keys[kid].dtype, ctx=outs[0].context)
            self._ops.pull(kid, value, self._token_of(kid), priority)
            for o in outs:
                if o is not value:
                    value.copyto(o)

    def pushpull(self, key, value, out=None, priority=0):
        groups = group(key, value, "pushpull")
        outs = [vals for _, vals in groups] if out is None else \
            [o for _, o in group(key, out, "pushpull out")]
        for (k, vals), targets in zip(groups, outs):
            kid, all_dense = self._checked.once("pushpull", k, vals + targets,
                                                lambda: self._pushpull_checks(k, vals, targets))
            if self._local is not None:
                self._local.step(kid, self._summed(vals), targets)
                continue
            # the operation writes the first target (in place when it is the gradient)
            data = vals[0] if all_dense and len(vals) == 1 else self._summed(vals)
            self._ops.pushpull(kid, data, targets[0], self._token_of(kid), priority)
            for o in targets[1:]:
                targets[0].copyto(o)

    def _push_checks(self, key, vals) -> tuple:
        """(key id, whether every value is dense)"""
        check_arrays(vals, f"push of key {key!r}")
        return self._keys.declared(key, vals), all(v.stype == "default" for v in vals)

    def _pull_checks(self, key, outs, ignore_sparse: bool) -> tuple:
        """(key id, the outputs written, whether the first has the key's dtype)"""
        check_arrays(outs, f"pull of key {key!r}")
        kid = self._keys.declared(key, outs, any_dtype=True)
        outs = sparse_outs(outs, ignore_sparse, f"pull of key {key!r}")
        return kid, outs, bool(outs) and np.dtype(outs[0].dtype) == self._client.keys[kid].dtype

    def _pushpull_checks(self, key, vals, targets) -> tuple:
        """(key id, whether every value is dense)"""
        check_arrays(vals + targets, f"pushpull of key {key!r}")
        kid = self._keys.declared(key, vals + targets)
        sparse_outs(targets, False, f"pushpull of key {key!r}")
        return kid, all(v.stype == "default" for v in vals)

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        """The rows ``row_ids`` (any order, repeats allowed) of each key's value into the
        row_sparse ``out`` (:func:`.row_sparse.row_sparse_pull`; the value travels dense)."""
        row_sparse_pull(key, out, row_ids, self._keys.declared, self.pull)

    def barrier(self):
        if self.sync_mode == "esync" and self._local.keys and \
                any(local.rounds for local in self._local.keys.values()):
            raise KVStoreError("barrier: under sync mode 'esync' workers run different "
                               "numbers of rounds, so once training started a barrier would "
                               "wait for rounds that never come; call it before the first "
                               "step only (a worker that finishes just closes the store)")
        mx.nd.waitall()
        self._client.barrier()

    def _barrier(self):
        self.barrier()

    def _set_updater(self, updater):
        raise KVStoreError("netstorm runs the optimizer on its servers (or, under hfa/esync, "
                           "on the workers): give it one with set_optimizer; a Python "
                           "updater function cannot travel to the servers")

    def _send_command_to_servers(self, head, body):
        raise KVStoreError("netstorm's servers take no MXNet server commands (server "
                           "profiling: see docs/kvstore.md)")

    def __del__(self):
        """Nothing native to free (MXNet's KVStore frees its C handle here)."""

    # ------------------------------------------------------------ options
    def set_gradient_compression(self, compression_params):
        """Accepted when it names the compression the cluster runs with (one setting is in
        force cluster-wide, from the cluster file's ``[compression]``); anything else is a
        clear error, never a silent mismatch."""
        wanted = CompressionConfig.from_params(compression_params)
        in_force = self._client.compression
        if isinstance(compression_params, dict) and "scope" not in compression_params:
            wanted = replace(wanted, scope=in_force.scope)  # MXNet's dict never names one
        if wanted != in_force:
            raise CompressionError(
                f"this cluster runs with compression {in_force.to_params()}, the script asks "
                f"for {wanted.to_params()}: one setting is in force cluster-wide; set it in "
                f"the cluster file's [compression] table (docs/compression.md)")

    def wait_inner_steps(self) -> bool:
        """Under the local-update modes (hfa, esync, diloco): wait until this worker's own
        optimizer steps since the last call are computed, but not for the synchronizations
        they started, and return True; under the others (the optimizer runs on the
        servers) return False at once. For timing a loop's compute apart from its waits
        (``bench.py --mode train``'s compute utilization)."""
        if self._local is None:
            return False
        self._local.wait_inner_steps()
        return True

    def set_optimizer(self, optimizer):
        if self._local is not None:     # hfa / esync: the servers take no optimizer
            self._local.set_optimizer(optimizer)
            self._updater = self._local.updater
            return
        self._spec = optimizer_spec(optimizer)
        self._client.set_optimizer(self._spec)
        self._updater = mx.optimizer.get_updater(optimizer)

    def save_checkpoint(self, fname=None) -> int:
        """Write every key's value, the servers' optimizer and its states, from this DC's
        replica, to ``fname`` (default: the cluster file's ``[recovery] checkpoint``; one
        ``.npz``, docs/recovery.md), without stopping the others; ``launch.py --resume
        fname`` starts a run from it. Call it on one worker between two steps (every key
        pulled after the same round). Returns that round."""
        fname = fname or self._client.po.settings.checkpoint
        if not fname:
            raise KVStoreError("save_checkpoint: give a file name, or set [recovery] "
                               "checkpoint in the cluster file")
        if self._local is not None:
            raise KVStoreError(f"save_checkpoint: under sync mode {self.sync_mode!r} the "
                               f"workers' own models are not on the servers; save the "
                               f"parameters (gluon save_parameters) instead")
        return save_checkpoint(self._client, fname, self._updater, self._spec, self._sparse)

    def save_optimizer_states(self, fname, dump_optimizer=False):
        if self._local is not None:
            mx.nd.waitall()
            with open(fname, "wb") as f:
                f.write(self._local.save_states(dump_optimizer))
            return
        save_optimizer_states(self._client, self._updater, fname, dump_optimizer)

    def load_optimizer_states(self, fname):
        if self._local is not None:
            mx.nd.waitall()
            with open(fname, "rb") as f:    # the user's own file, in MXNet's format
                self._local.load_states(f.read())
            return
        self._spec = load_optimizer_states(self._client, self._updater, fname)

    # ------------------------------------------------------------ lifecycle
    def _stop_on_sigterm(self, run_dir: str) -> None:
        """Under the launcher (``run_dir`` set), SIGTERM - the launcher stopping this DC
        because one of its processes failed - ends the script through ``SystemExit``, and
        the scheduler hears why, with the launcher's reason, instead of this worker just
        falling silent (and being named as the one that died), also from inside MXNet's
        engine (:mod:`.sigterm`). A script's own SIGTERM handler is left alone."""
        if not run_dir or threading.current_thread() is not threading.main_thread() or \
                signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def stopped() -> str:
            note = read_stop_note(run_dir)
            self._stopped_by = "stopped by SIGTERM" + (
                f" from its launcher, after: {note}" if note else "")
            self._failed = True
            self._client.caused_by_other = bool(note)
            return self._stopped_by
        stop_on_sigterm(stopped, lambda reason: self._client.close(clean=False, reason=reason))

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
        self._ops.release()     # after close: an operator still waiting has failed by now
