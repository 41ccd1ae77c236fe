"""How a worker joins its cluster: its Van (with its DC's keys, on a port of its
``worker_ports`` range when the cluster file gives one, reached at its advertised address),
registration with the scheduler, and, should either fail, one line saying why, also left
for the launcher (:meth:`~netstorm.geoserver.worker.settings.WorkerSettings.cannot_join`):
the store that reports a script's failure does not exist yet. Bounded by ``timeout_s``
(twice, to hear the scheduler's own answer); a refused handshake ends it at once."""
from __future__ import annotations

import socket

from ..config.exit_reasons import write_reason
from ..core.nodes import WORKER, NodeInfo
from ..core.postoffice import Postoffice, RendezvousError
from ..core.van import TransportError, Van
from .settings import KVStoreError, WorkerSettings

__all__ = ["join", "open_van", "port_free"]

IN_USE = "address already in use"       # how a Van says its port was taken


def port_free(host: str, port: int) -> bool:
    """Whether TCP ``port`` can be bound on ``host`` now (as ZeroMQ binds: SO_REUSEADDR,
    so a port whose last connection lingers in TIME_WAIT counts as free)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def open_van(settings: WorkerSettings) -> Van:
    """This worker's Van, bound on ``settings.host``: on the lowest free port of its range
    (workers of one host take the range's ports in order; one taken meanwhile by another
    is passed over), or on any free port without a range. O(ports of the range)."""
    credentials = settings.credentials()

    def bind(port: int) -> Van:
        return Van(f"worker {settings.dc}", settings.host, port, credentials=credentials,
                   local_dir=settings.run_dir, advertise=settings.advertise, wakeable=True)

    span = settings.port_range()
    if not span:
        return bind(0)
    low, high = span
    for port in range(low, high + 1):
        if not port_free(settings.host, port):
            continue
        try:
            return bind(port)
        except TransportError as exc:
            if IN_USE not in str(exc):
                raise
    raise KVStoreError(f"worker of {settings.dc}: no free port in worker_ports {low}-{high} "
                       f"on {settings.host}: its {high - low + 1} port(s) are all in use "
                       f"(widen the DC's worker_ports in the cluster file, or stop what "
                       f"holds them)")


def join(settings: WorkerSettings) -> tuple:
    """``(van, postoffice, this worker's NodeInfo)``, registered; :class:`KVStoreError`
    naming the cause if it cannot join (the Van closed again)."""
    try:
        van = open_van(settings)
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
