"""Joining the cluster from a PyTorch script: :func:`init` and :class:`Session`.

:func:`init` is the process edge: it reads where the cluster is from the environment the
launcher (``netstorm-launch``) set, exactly as the MXNet plug-in does
(:class:`~netstorm.geoserver.worker.settings.WorkerSettings`), joins through the one worker
client (:class:`~netstorm.geoserver.worker.client.WorkerClient`), and then sets PyTorch's
conventions ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` for the script
(the rank is the scheduler's, known only once joined). The :class:`Session` it returns is
what the optimizers and broadcasts of this package are given: the client and the keys' ids.

A key's id is its order of creation (every worker creates the same keys in the same order,
as MXNet's str keys are numbered); ids are also the WAN's priority among chunks of one round
(lower first), so the optimizers number parameters in the model's forward order.
"""
from __future__ import annotations

import atexit
import os
import sys

from netstorm.geoserver.worker.client import WorkerClient, WorkerSettings

__all__ = ["Session", "TorchSessionError", "init"]

MAX_KEY = 2 ** 32 - 1   # the wire's key field (netstorm.kvstore.key_ids.MAX_KEY)
MODES_OF = {"fsa": "DistributedOptimizer", "hfa": "LocalUpdates", "diloco": "LocalUpdates"}


class TorchSessionError(RuntimeError):
    """The script uses netstorm.torch in a way the cluster cannot serve."""


class Session:
    """One worker's membership of the cluster, for PyTorch. Holds the worker client and
    the next free key id. ``client``: a
    :class:`~netstorm.geoserver.worker.client.WorkerClient` (or an object with its API)."""

    def __init__(self, client):
        self.client = client
        self._next_key = 0
        self.closed = False

    # ------------------------------------------------------------ identity
    @property
    def rank(self) -> int:
        return self.client.me.rank

    @property
    def size(self) -> int:
        """Workers in every DC."""
        return self.client.num_workers

    @property
    def local_rank(self) -> int:
        """Rank of this worker within its DC."""
        return self.client.me.local_rank

    @property
    def local_size(self) -> int:
        """Workers in this worker's DC."""
        return len(self.client.po.table.workers(self.client.me.dc))

    @property
    def dc(self) -> str:
        return self.client.me.dc

    @property
    def sync(self):
        """The cluster's :class:`~netstorm.geoserver.config.sync.SyncConfig`."""
        return self.client.sync

    @property
    def resumed_round(self) -> int:
        """0, or for a worker restarted into its rank, the steps its lost process had
        completed (skip that many batches; docs/recovery.md)."""
        return self.client.resumed_round

    def torch_environment(self) -> dict:
        """PyTorch's names for this worker's place: RANK, WORLD_SIZE, LOCAL_RANK,
        LOCAL_WORLD_SIZE (strings, as in ``os.environ``)."""
        return {"RANK": str(self.rank), "WORLD_SIZE": str(self.size),
                "LOCAL_RANK": str(self.local_rank), "LOCAL_WORLD_SIZE": str(self.local_size)}

    # ------------------------------------------------------------ keys
    def new_keys(self, count: int) -> range:
        """``count`` fresh key ids, the next in order. O(1)."""
        if self.closed:
            raise TorchSessionError("the netstorm session is closed")
        first = self._next_key
        if first + count - 1 > MAX_KEY:
            raise TorchSessionError(f"more than {MAX_KEY + 1} netstorm keys asked for")
        self._next_key += count
        return range(first, first + count)

    def require_mode(self, user: str) -> None:
        """Raise :class:`TorchSessionError` unless ``user`` (a class of this package)
        serves the cluster's sync mode."""
        mode = self.sync.mode
        wanted = MODES_OF.get(mode)
        if wanted == user:
            return
        if wanted is None:
            raise TorchSessionError(
                f"{user}: the cluster runs sync mode {mode!r}, which netstorm.torch does not "
                f"serve (fsa: DistributedOptimizer; hfa, diloco: LocalUpdates); set the "
                f"cluster file's [sync] mode or launch --sync (docs/torch.md)")
        raise TorchSessionError(f"{user}: the cluster runs sync mode {mode!r}: use "
                                f"netstorm.torch.{wanted} (docs/torch.md)")

    # ------------------------------------------------------------ lifecycle
    def close(self, clean: bool = True, reason: str = "") -> None:
        """Tell the scheduler this worker is done (or failed for ``reason``) and close the
        sockets. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.client.close(clean=clean, reason=reason)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, etype, value, tb) -> None:
        self.close(clean=etype is None,
                   reason="" if etype is None else f"{etype.__name__}: {value}")


def init(environ=None, client_factory=None) -> Session:
    """Join the cluster the launcher described in ``environ`` (default ``os.environ``),
    set RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE there, and return the
    :class:`Session`. The session closes at exit; a script that dies of an uncaught
    exception tells the scheduler why (it stops the others naming this worker).
    ``client_factory(settings)``: the worker client (default
    :class:`~netstorm.geoserver.worker.client.WorkerClient`)."""
    environ = os.environ if environ is None else environ
    settings = WorkerSettings.from_env(environ)
    session = Session((client_factory or WorkerClient)(settings))
    environ.update(session.torch_environment())
    previous = sys.excepthook

    def report(etype, value, tb):
        previous(etype, value, tb)
        if not issubclass(etype, KeyboardInterrupt):
            session.close(clean=False, reason=f"{etype.__name__}: {value}")
    sys.excepthook = report
    atexit.register(session.close)
    return session
