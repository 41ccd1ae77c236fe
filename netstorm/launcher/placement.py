"""Which of a cluster's processes a launcher starts, and where each one runs. Pure.

A cluster file places the scheduler on its ``[scheduler]`` host, each DC's server on the DC's
host, and the DC's workers on its ``worker_hosts`` in turn (default: the server's host). A
:class:`Part` is the share of those processes one launcher starts: the whole cluster, some
DCs (``--dc``), or everything placed on one host (``--host``, what ``--ssh`` runs on each).
:func:`misplaced` says which of a part's processes would bind an address that is not this
machine's (the launcher refuses such a part before it starts anything).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Bind", "Part", "binds", "hosts", "misplaced", "of_dcs", "on_host", "whole"]

WILDCARDS = ("0.0.0.0", "::")   # bind every interface: this machine's, wherever it is


@dataclass(frozen=True)
class Part:
    """A share of a cluster's processes: the scheduler or not, servers by DC name, workers
    as ``(dc name, index in its DC)``."""

    scheduler: bool
    servers: tuple = ()
    workers: tuple = ()

    @property
    def empty(self) -> bool:
        return not (self.scheduler or self.servers or self.workers)

    def count(self) -> str:
        """``2 DC(s), 4 worker(s)``: the DCs with a process here, the workers."""
        dcs = set(self.servers) | {dc for dc, _ in self.workers}
        return f"{len(dcs)} DC(s), {len(self.workers)} worker(s)"

    def describe(self) -> str:
        """``scheduler, server eu, workers eu/0 us/1``."""
        parts = ["scheduler"] if self.scheduler else []
        parts += [f"server {dc}" for dc in self.servers]
        if self.workers:
            parts.append("worker" + ("s" if len(self.workers) > 1 else "") + " " +
                         " ".join(f"{dc}/{i}" for dc, i in self.workers))
        return ", ".join(parts) or "nothing"


def whole(config) -> Part:
    """Every process of the cluster. O(workers)."""
    return of_dcs(config, None, True)


def of_dcs(config, names, scheduler: bool) -> Part:
    """Every process of the DCs ``names`` (None: all DCs), and the scheduler if asked.
    O(workers)."""
    chosen = [dc for dc in config.dcs if names is None or dc.name in names]
    return Part(scheduler, tuple(dc.name for dc in chosen),
                tuple((dc.name, i) for dc in chosen for i in range(dc.workers)))


def on_host(config, host: str) -> Part:
    """Every process the cluster file places on ``host``. O(workers)."""
    return Part(config.scheduler_reached_at == host,
                tuple(dc.name for dc in config.dcs if dc.server_host == host),
                tuple((dc.name, i) for dc in config.dcs for i in range(dc.workers)
                      if dc.worker_host(i) == host))


def hosts(config) -> list:
    """Every host the cluster places a process on, once each: the scheduler's first, then
    in the file's order. O(workers)."""
    found = [config.scheduler_reached_at]
    for dc in config.dcs:
        found.append(dc.server_host)
        found += [dc.worker_host(i) for i in range(dc.workers)]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Bind:
    """The address one process binds, and which field of the cluster file places it."""

    process: str        # ``scheduler``, ``server eu``, ``worker eu/0``
    field: str          # ``[scheduler] host``, ``DC eu's worker_hosts``
    address: str


def binds(config, part: Part) -> list:
    """Every process of ``part`` with the address it binds (a worker binds the address it
    runs on: its DC's ``worker_hosts`` in turn, else where its server is reached).
    O(processes)."""
    found = [Bind("scheduler", "[scheduler] host", config.scheduler_host)] \
        if part.scheduler else []
    for name in part.servers:
        found.append(Bind(f"server {name}", f"DC {name}'s host", config.dc(name).host))
    for name, i in part.workers:
        dc = config.dc(name)
        field = "worker_hosts" if dc.worker_hosts else "advertise" if dc.advertise else "host"
        found.append(Bind(f"worker {name}/{i}", f"DC {name}'s {field}", dc.worker_host(i)))
    return found


def misplaced(config, part: Part, is_local) -> list:
    """The :class:`Bind` of every process of ``part`` whose address ``is_local(address)``
    says is not this machine's (a wildcard address is). ``is_local`` is asked once per
    distinct address. O(processes)."""
    answers: dict = {}
    out = []
    for bind in binds(config, part):
        if bind.address in WILDCARDS:
            continue
        if bind.address not in answers:
            answers[bind.address] = bool(is_local(bind.address))
        if not answers[bind.address]:
            out.append(bind)
    return out
