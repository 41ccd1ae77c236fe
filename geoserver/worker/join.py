"""How a worker joins its cluster: its Van (with its DC's keys), registration with the
scheduler, and, should either fail, one line saying why, also left for the launcher
(:meth:`~netstorm.geoserver.worker.settings.WorkerSettings.cannot_join`): the store that
reports a script's failure does not exist yet. Bounded by ``timeout_s`` (twice, to hear the
scheduler's own answer); a refused handshake ends it at once."""
from __future__ import annotations

from ..config.exit_reasons import write_reason
from ..core.nodes import WORKER, NodeInfo
from ..core.postoffice import Postoffice, RendezvousError
from ..core.van import TransportError, Van
from .settings import KVStoreError, WorkerSettings

__all__ = ["join"]


def join(settings: WorkerSettings) -> tuple:
    """``(van, postoffice, this worker's NodeInfo)``, registered; :class:`KVStoreError`
    naming the cause if it cannot join (the Van closed again)."""
    try:
        van = Van(f"worker {settings.dc}", settings.host, 0, credentials=settings.credentials(),
                  local_dir=settings.run_dir, wakeable=True)
    except (KVStoreError, TransportError) as exc:
        raise settings.cannot_join(exc) from exc
    try:
        po = Postoffice(van, settings.scheduler, WORKER, settings.dc)
        me: NodeInfo = po.register(settings.timeout_s, settings.local_index)
    except (RendezvousError, TransportError) as exc:
        van.close()
        raise settings.cannot_join(exc) from exc
    except BaseException:
        van.close()
        raise
    write_reason(settings.joined_file, f"joined as {me.describe()}")
    return van, po, me
