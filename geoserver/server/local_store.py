"""The local-server role: one DC's keys, its workers' pushes and pulls, the weight replica.

Pure logic like :mod:`aggregation`: replies leave through ``reply(worker_id, message)``, the
DC's sum of a chunk leaves through ``contribute(chunk_id, array, (start, stop, key_size))``
and the complete WAN sum comes back through :meth:`KeyStore.deliver`. Workers send and
receive a key as one frame; the WAN cuts it into chunks by the layout of the policy in force
for the round, which goes with each chunk (compression's residuals are per coordinate).

dist_sync semantics per key: round r is the r-th push of every worker; when all of this DC's
workers pushed round r, its chunks go to the WAN; when every chunk's global sum is back the
round is applied (optimizer step on the replica, or the sum becomes the value), and pulls
waiting for round r are answered. Stored arrays are replaced, never modified in place, since
earlier values may still sit in ZeroMQ's send queue.

Where the synchronization modes differ (docs/sync.md), the store asks its mode's strategy
(:mod:`~netstorm.geoserver.server.sync_modes`, chosen once from the ``SyncConfig``): what a
push needs, which workers a round waits for, what a DC sends the WAN, how a round is
applied, which pulls may be answered. What a recovery needs of the store is its replica side
(:mod:`~netstorm.geoserver.server.store_replicas`, ``store.replicas``); the records are in
:mod:`~netstorm.geoserver.server.store_keys`.

A push is O(key size) (its sum), a chunk total O(chunk size), applying a round O(key size)
(the optimizer's step), answering pulls O(pulls waiting) plus a copy per shared value.
"""
from __future__ import annotations

import logging

import numpy as np

from ..model import checkpoint
from ..policy.chunking import ChunkId
from .buffer_pool import BufferPool
from ..compression import payload
from ..model.optimizer_host import OptimizerHost, OptimizerSpecError
from ..core.ratelog import RateLimitedLog
from .shared_segments import SharedSegments
from .store_keys import KeyEntry, RequestError, Round
from .store_replicas import StoreReplicas
from .sync_modes import create as create_sync_mode
from ..config.sync import SyncConfig
from ..core.wire import Flag, Kind, Message

__all__ = ["KeyStore", "RequestError"]

log = logging.getLogger(__name__)


class KeyStore:
    def __init__(self, dc: str, workers, chunk_bytes: int, policies, reply, contribute,
                 forward_init, compressed_pushes: bool = False, momentum_corrected=False,
                 sync: SyncConfig = SyncConfig(), mixed=None, resumed=None,
                 all_workers: int | None = None, quorum_ready=None,
                 workers_per_dc: dict | None = None):
        """``compressed_pushes``: local workers may push compressed payloads (compression
        scope "all"); otherwise such a push is refused. ``momentum_corrected``: compression
        applies DGC momentum, so an optimizer with momentum of its own is refused.
        ``sync``: the cluster's synchronization; ``mixed``: its MixedExchange (mode mixed).
        ``resumed``: the checkpoint this run starts from: its values replace the keys'
        initial ones and its optimizer states are loaded (docs/recovery.md).
        ``all_workers``: how many workers the cluster has (the averaging modes divide by
        it; default: those of ``workers_per_dc``, else this DC's). ``quorum_ready(wan_round, through)``: quorum rounds (hfa,
        diloco) offer this DC's rounds to the scheduler (None: no quorum rounds).
        ``workers_per_dc``: dc -> its workers, for :meth:`contributors` (None: every round
        comes from ``all_workers``)."""
        self.dc = dc
        self.resumed = resumed
        self.sync = sync
        self.momentum_corrected = momentum_corrected
        self.compressed_pushes = compressed_pushes
        self.compressed_received = 0    # compressed pushes taken
        self.policies = policies
        self.workers = set(workers)
        self.workers_per_dc = workers_per_dc
        if all_workers is None:
            all_workers = sum(workers_per_dc.values()) if workers_per_dc else len(self.workers)
        self.all_workers = int(all_workers)
        self.chunk_bytes = chunk_bytes
        self._reply = reply
        self._contribute = contribute
        self._forward_init = forward_init
        self.keys: dict = {}
        self.max_round = 0          # the latest WAN round any local worker has pushed for
        self.optimizer: OptimizerHost | None = None
        self.spec = None
        self.shared = SharedSegments()  # local workers' keys in shared memory
        self.buffers = BufferPool()     # round sums and totals, reused round after round
        self.drops = RateLimitedLog(log)
        self.quorum_ready = quorum_ready
        self.mode = create_sync_mode(sync, self, mixed)     # what differs between modes
        self.replicas = StoreReplicas(self)                 # what recovery needs of it
        self.audit = None       # a ReplicaDigests told of every round applied (the server
                                # sets it; docs/recovery-audit.md)
        self.keep_applied = False   # keep each key's last applied round (its local sum), so
                                    # a repair can sum it again (docs/recovery-audit.md)

    # ------------------------------------------------------------ helpers
    def contributors(self, wan_round: int) -> int:
        """How many workers WAN round ``wan_round`` comes from: those of the DCs its policy
        spans (an elastic run's members then, docs/recovery-elastic.md), else every
        worker. O(DCs)."""
        if self.workers_per_dc is None:
            return self.all_workers
        return self.policies.for_round(wan_round).contributors(self.workers_per_dc)

    def entry(self, key: int, shape, dtype) -> KeyEntry:
        """The entry of ``key`` declared as ``shape`` and ``dtype`` (made at the first
        declaration); another shape or dtype than the first is refused."""
        shape, dtype = tuple(int(s) for s in shape), np.dtype(dtype)
        entry = self.keys.get(key)
        if entry is None:
            if any(s < 0 for s in shape):
                raise RequestError(f"key {key}: negative dimension in shape {shape}")
            entry = KeyEntry(key, dtype, shape)
            self.keys[key] = entry
        elif entry.shape != shape or entry.dtype != dtype:
            raise RequestError(f"key {key} was initialized as {entry.shape} {entry.dtype}, "
                               f"now declared as {shape} {dtype}")
        return entry

    def acknowledged_round(self) -> int:
        """The WAN rounds every key applied here (0 before any key): each of their chunk
        messages reached its peer. O(keys)."""
        if not self.keys:
            return 0
        return min(e.applied for e in self.keys.values()) // self.sync.rounds_per_wan_round

    def model_bytes(self) -> int:
        """The bytes of every key declared here (the model). O(keys)."""
        return sum(e.size * e.dtype.itemsize for e in self.keys.values())

    def known(self, key: int) -> KeyEntry:
        """The entry of an initialized ``key``; any other is refused."""
        entry = self.keys.get(key)
        if entry is None or entry.value is None and entry.init_gen == 0:
            raise RequestError(f"key {key} has not been initialized (call init first)")
        return entry

    def _value_message(self, entry: KeyEntry, worker: int, request: int, shared: bool) -> Message:
        """The key's value for ``worker``: in its shared value slot if it asked for that
        and has one (one copy), else as a frame (zero-copy)."""
        slot = self.shared.value(worker, entry.key) if shared else None
        if slot is None:
            return Message(Kind.VALUE, key=entry.key, seq=entry.applied, request=request,
                           dtype=entry.dtype, frames=[entry.value])
        slot[:] = entry.value
        return Message(Kind.VALUE, key=entry.key, seq=entry.applied, request=request,
                       flags=Flag.SHARED, dtype=entry.dtype)

    def _check_frame(self, entry: KeyEntry, msg: Message) -> np.ndarray:
        """The one frame of a whole key, checked against the key's dtype and size."""
        if msg.dtype != entry.dtype:
            raise RequestError(f"key {entry.key}: data is {msg.dtype}, key is {entry.dtype}")
        arrays = msg.arrays()
        if len(arrays) != 1 or len(arrays[0]) != entry.size:
            raise RequestError(f"key {entry.key}: expected one frame of {entry.size} elements, "
                               f"got {[len(a) for a in arrays]}")
        return arrays[0]

    def _push_frame(self, entry: KeyEntry, msg: Message) -> np.ndarray:
        """A push's values: its frame, its worker's shared push slot (a view: copy it before
        the push is answered), or the decoded payload of a compressed push."""
        if msg.flags & Flag.SHARED:
            slot = self.shared.push(msg.sender, entry.key)
            if slot is None or msg.dtype != entry.dtype:
                raise RequestError(f"key {entry.key}: a push in shared memory, but this "
                                   f"worker shares no {entry.dtype} segment for the key")
            return slot
        if not msg.flags & Flag.ENCODED:
            return self._check_frame(entry, msg)
        if not self.compressed_pushes or entry.dtype != np.float32:
            what = "float32 only" if self.compressed_pushes else "only the WAN"
            raise RequestError(f"key {entry.key}: compressed push, but this cluster compresses "
                               f"{what}")
        arrays = msg.arrays()
        if len(arrays) != 1:
            raise RequestError(f"key {entry.key}: a compressed push has one frame, got "
                               f"{len(arrays)}")
        values = payload.decode(arrays[0], entry.size)    # PayloadError: a WireError
        self.compressed_received += 1
        return values

    # ------------------------------------------------------------ init
    def on_init(self, msg: Message) -> None:
        """INIT from a local worker (rank 0 carries the value) or from another DC's server."""
        try:
            shape, dtype = msg.meta["shape"], msg.meta["dtype"]
        except KeyError as exc:
            raise RequestError(f"INIT of key {msg.key} lacks {exc}") from exc
        entry = self.entry(msg.key, shape, dtype)
        entry.sparse = entry.sparse or msg.meta.get("stype") == "row_sparse"
        generation = msg.seq
        saved = generation == 1 and self.resumed is not None and \
            entry.key in self.resumed.values    # a resumed run's first INIT of a saved key
        if saved and entry.init_gen == 0:
            self._from_checkpoint(entry)    # in every DC: nothing waits for the WAN
        elif msg.flags & Flag.HAS_VALUE and not saved:
            entry.value = entry.base = np.array(self._check_frame(entry, msg), copy=True)
            entry.init_gen = max(entry.init_gen, generation)
            self.mode.value_known(entry)
            if msg.sender in self.workers:
                self._forward_init(entry, generation)
        if msg.sender in self.workers:
            if "shm_fd" in msg.meta:
                self._share(entry, msg)
            entry.inits.append((msg.sender, msg.request, generation))
        self._answer_inits(entry)

    def _share(self, entry: KeyEntry, msg: Message) -> None:
        """A local worker offers its segment for the key: map it, or say why not (the key
        then goes by frames; its INIT_DONE tells the worker which)."""
        if entry.sparse:
            why = "a row_sparse key goes by frames"
        else:
            why = self.shared.attach(msg.sender, entry.key, msg.peer_pid,
                                     msg.meta["shm_fd"], entry.size, entry.dtype)
        if why:
            self.shared.detach(msg.sender, entry.key)
            self.drops.log(msg.sender, "%s: key %d of node %d goes by frames, not shared "
                            "memory: %s", self.dc, entry.key, msg.sender, why)

    def _from_checkpoint(self, entry: KeyEntry) -> None:
        """A key's value from the checkpoint of a resumed run: every DC's server reads the
        same file, so no DC waits for rank 0's value to cross the WAN."""
        try:
            entry.value = entry.base = checkpoint.initial_value(
                self.resumed, entry.key, entry.shape, entry.dtype)
        except checkpoint.CheckpointError as exc:
            raise RequestError(f"[recovery] resume: {exc}") from None
        entry.sparse = entry.sparse or entry.key in self.resumed.sparse
        entry.init_gen = 1

    def _answer_inits(self, entry: KeyEntry) -> None:
        ready = [i for i in entry.inits if i[2] <= entry.init_gen]
        entry.inits = [i for i in entry.inits if i[2] > entry.init_gen]
        for worker, request, _ in ready:
            self._reply(worker, Message(Kind.INIT_DONE, key=entry.key, request=request,
                                        meta={"shared": self.shared.has(worker, entry.key)}))

    # ------------------------------------------------------------ push / pull
    def on_push(self, msg: Message) -> None:
        entry = self.known(msg.key)
        expected = entry.next_push.get(msg.sender, entry.applied + 1)
        if msg.seq != expected:
            raise RequestError(f"key {msg.key}: push round {msg.seq} from node {msg.sender}, "
                               f"expected round {expected}")
        self.mode.check_push(entry, msg.seq)
        array = self._push_frame(entry, msg)
        entry.next_push[msg.sender] = expected + 1
        self.max_round = max(self.max_round, self.sync.wan_round(msg.seq))
        if self.mode.took_push(entry, msg.seq, array, msg.sender):     # quorum rounds
            if msg.flags & Flag.WANT_VALUE:
                entry.pulls.append((msg.sender, msg.request, msg.seq,
                                    bool(msg.flags & Flag.REPLY_SHARED)))
            self.answer_pulls(entry)
            return
        rnd = entry.rounds.setdefault(msg.seq, Round())
        rnd.pushed.add(msg.sender)
        if rnd.local is None and msg.flags & Flag.SHARED:
            rnd.local, rnd.owned = self.buffers.copy(array), True   # the worker reuses it
        elif rnd.local is None:
            rnd.local = array
        elif not rnd.owned:     # received frames stay intact
            rnd.local, rnd.owned = self.buffers.add(rnd.local, array), True
        else:
            np.add(rnd.local, array, out=rnd.local)
        if msg.flags & Flag.WANT_VALUE:
            entry.pulls.append((msg.sender, msg.request, msg.seq,
                                bool(msg.flags & Flag.REPLY_SHARED)))
        if rnd.pushed >= self.mode.needed(entry.key, msg.seq):
            self.mode.round_ready(entry, msg.seq, rnd)

    def worker_left(self, worker: int, pushes: dict, everyone: bool) -> None:
        """esync: local worker ``worker`` finished after pushing ``pushes[key]`` rounds of
        each key (``everyone``: it was the last worker anywhere); the rounds after those go
        on without it (:meth:`EsyncMode.worker_left`)."""
        self.mode.worker_left(worker, pushes, everyone)

    def to_wan(self, entry: KeyEntry, rnd_no: int, rnd: Round) -> None:
        """Cut this DC's contribution to round ``rnd_no`` (its sync mode's: the sum of its
        workers' pushes, or a model delta) into WAN chunks and hand them to the exchange."""
        if self.replicas.frozen:
            return                  # sent by replicas.replay()
        contribution = self.mode.contribution(entry, rnd)
        wan_round = self.sync.wan_round(rnd_no)
        policy = self.policies.for_round(wan_round)
        rnd.layout = policy.layout(entry.key, entry.size, entry.dtype.itemsize,
                                   self.chunk_bytes)
        for c, (start, stop, tree) in enumerate(rnd.layout):
            self._contribute(ChunkId(entry.key, c, wan_round, policy.version, tree),
                             contribution[start:stop], (start, stop, entry.size))

    def on_pull(self, msg: Message) -> None:
        entry = self.known(msg.key)
        entry.pulls.append((msg.sender, msg.request, msg.seq,
                            bool(msg.flags & Flag.REPLY_SHARED)))
        self.answer_pulls(entry)

    def answer_pulls(self, entry: KeyEntry) -> None:
        if entry.value is None:
            return
        upto = self.mode.answerable(entry)
        ready = [p for p in entry.pulls if p[2] <= upto]
        if not ready:
            return
        entry.pulls = [p for p in entry.pulls if p[2] > upto]
        for worker, request, _, shared in ready:
            self._reply(worker, self._value_message(entry, worker, request, shared))

    def _expects(self, key: int, chunk: int, rnd_no: int, total) -> str:
        """Why a chunk total cannot be this DC's (a key, round or chunk it did not send to
        the WAN, or another size or dtype); "" when it can. ``rnd_no``: a DC round."""
        entry = self.keys.get(key)
        rnd = None if entry is None else entry.rounds.get(rnd_no)
        if rnd is None or not 0 <= chunk < len(rnd.layout):
            return f"key {key} round {rnd_no} chunk {chunk} was not sent from here"
        start, stop, _ = rnd.layout[chunk]
        if len(total) != stop - start or total.dtype != entry.dtype:
            return (f"key {key} chunk {chunk} has {stop - start} x {entry.dtype}, the total "
                    f"{len(total)} x {total.dtype}")
        return ""

    def deliver(self, key: int, chunk: int, wan_round: int, total) -> None:
        """The global sum of one chunk of ``wan_round`` arrived (or was completed here); a
        total this DC never asked for is logged and dropped."""
        rnd_no = wan_round * self.sync.rounds_per_wan_round     # its last DC round
        problem = self._expects(key, chunk, rnd_no, total)
        if problem:
            self.drops.log("totals", "%s: dropped a chunk total: %s", self.dc, problem)
            return
        entry = self.keys[key]
        rnd = entry.rounds[rnd_no]
        if len(rnd.layout) == 1:
            rnd.total = total           # one chunk: the WAN's array is the value, no copy
        else:
            if rnd.total is None:
                rnd.total = self.buffers.take(entry.size, entry.dtype)
            start, stop, _ = rnd.layout[chunk]
            rnd.total[start:stop] = total
        rnd.chunks_done += 1
        self.apply_complete(entry)

    def apply_complete(self, entry: KeyEntry) -> None:
        """Apply the complete rounds that are next, in order, and answer the pulls."""
        while entry.applied + 1 in entry.rounds and entry.rounds[entry.applied + 1].complete:
            done = entry.rounds.pop(entry.applied + 1)
            self.mode.apply(entry, done)
            entry.applied += 1
            if self.keep_applied:
                done.total, entry.kept = None, done
            if self.audit is not None:
                self.audit.applied(entry, self.optimizer)
        self.answer_pulls(entry)
        self.mode.settled(entry)

    # ------------------------------------------------------------ mixed
    def compensated_step(self, key: int, grad, then):
        """mixed: one optimizer step of ``grad`` on this DC's weights of ``key``, delay-
        compensated against ``then``, the weights it was computed on; the new weights."""
        entry = self.keys[key]
        entry.value = self.optimizer.update(key, grad.reshape(entry.shape),
                                            entry.value.reshape(entry.shape),
                                            then.reshape(entry.shape))
        return entry.value

    def on_update(self, msg: Message, sender_dc: str) -> None:
        """mixed: another DC's round of a key, from ``sender_dc``; one that cannot be taken
        is logged and dropped (:meth:`MixedMode.on_update`)."""
        self.mode.on_update(msg, sender_dc)

    # ------------------------------------------------------------ optimizer
    def on_resume(self, msg: Message) -> None:
        """A worker restarted into its rank asks how far it had got: the rounds of every key
        this node had pushed; and in a run resumed from a checkpoint, every worker asks the
        checkpoint's round (``base``), which its rounds continue (docs/recovery.md)."""
        pushed = [[entry.key, entry.next_push.get(msg.sender, entry.applied + 1) - 1]
                  for entry in self.keys.values() if entry.value is not None]
        base = 0 if self.resumed is None else self.resumed.round
        self._reply(msg.sender, Message(Kind.RESUMED, request=msg.request,
                                        meta={"pushed": pushed, "base": base}))

    def optimizer_wanted(self, msg: Message) -> bool:
        """Whether SET_OPTIMIZER ``msg`` needs an optimizer built (False: the one in place
        is of its spec); raises :class:`RequestError` if it cannot be taken."""
        spec = msg.meta.get("spec")
        self.mode.check_optimizer()
        if self.optimizer is not None and spec == self.spec:
            return False
        momentum = spec.get("attrs", {}).get("momentum") if isinstance(spec, dict) else None
        if self.momentum_corrected and isinstance(momentum, (int, float)) and momentum:
            raise RequestError(f"the cluster's compression applies momentum (DGC momentum "
                               f"correction); an optimizer with momentum={momentum} would "
                               f"apply it twice: use momentum=0 in the optimizer")
        problem = checkpoint.optimizer_problem(self.resumed, spec)
        if problem:
            raise RequestError(f"[recovery] resume: {problem}")
        return True

    def build_optimizer(self, spec) -> OptimizerHost:
        """The optimizer of ``spec``, with a resumed checkpoint's states: the slow part of
        SET_OPTIMIZER (it imports MXNet); it changes nothing here, so the server may run it
        on another thread. Raises :class:`OptimizerSpecError`."""
        optimizer = OptimizerHost(spec)
        if self.resumed is not None and self.resumed.optimizer is not None:
            optimizer.load_states(self.resumed.states_meta, self.resumed.state_frames)
        return optimizer

    def on_set_optimizer(self, msg: Message, build=None) -> None:
        """``build(spec)`` makes the optimizer (default :meth:`build_optimizer`; the server
        gives the result of one it ran off its loop)."""
        spec = msg.meta.get("spec")
        if not self.optimizer_wanted(msg):
            self._reply(msg.sender, Message(Kind.OPTIMIZER_DONE, request=msg.request))
            return
        try:
            self.optimizer = (build or self.build_optimizer)(spec)
        except OptimizerSpecError as exc:
            raise RequestError(str(exc)) from exc
        self.spec = spec
        log.info("%s: optimizer %s set by node %d", self.dc, self.optimizer.name, msg.sender)
        self.mode.optimizer_set()
        self._reply(msg.sender, Message(Kind.OPTIMIZER_DONE, request=msg.request))

    def on_save_states(self, msg: Message) -> None:
        if self.optimizer is None:
            raise RequestError("no optimizer was set on the servers (set_optimizer)")
        meta, frames = self.optimizer.dump_states()
        self._reply(msg.sender, Message(Kind.STATES, request=msg.request, meta=meta,
                                        dtype=np.uint8, frames=frames))

    def on_load_states(self, msg: Message) -> None:
        if self.optimizer is None:
            raise RequestError("no optimizer was set on the servers (set_optimizer)")
        try:
            self.optimizer.load_states(msg.meta, msg.frames)
        except (OptimizerSpecError, ValueError) as exc:
            raise RequestError(f"cannot load optimizer states: {exc}") from exc
        self._reply(msg.sender, Message(Kind.OPTIMIZER_DONE, request=msg.request))
