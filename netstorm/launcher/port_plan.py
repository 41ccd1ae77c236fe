"""Every TCP port a cluster's processes listen on, who connects to it, and from where: the
table docs/launch.md's "Networking" section describes, computed from a cluster file. Pure.

* the scheduler listens on ``[scheduler] port``; every server and worker connects to it;
* each DC's server listens on ``server_port``; the scheduler, the other DCs' servers and
  its own workers on other hosts connect to it;
* with the bulk channel (``[security]`` curve on, ``bulk_cipher = "aegis256"``), each
  server listens on ``bulk_port`` too; the other DCs' servers connect to it;
* each worker listens on a port of its DC's ``worker_ports``; the scheduler, and its DC's
  server when on another host, connect to it.

A worker and its DC's server on one host talk over an ``ipc://`` socket in the run's folder
(no port). A port of 0 (or no ``worker_ports``) is any free port, told to the peers through
the scheduler: a firewall between hosts must then let every port through.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Endpoint", "inbound_ports", "outbound", "plan", "random_across_hosts"]


@dataclass(frozen=True)
class Endpoint:
    """One listening socket (or, for workers, the sockets of a DC's workers on one host):
    its process runs on ``host``, binds ``bind``, is reached at ``reached`` on a port of
    ``low..high`` (0: any free port), ``count`` processes each binding one; ``dialers``:
    the hosts whose processes connect to it, ``who`` says which processes they are."""

    what: str
    host: str
    bind: str
    reached: str
    low: int
    high: int
    count: int
    dialers: tuple
    who: str
    field: str          # the cluster file's field that fixes the port

    @property
    def fixed(self) -> bool:
        return self.low != 0

    def ports(self) -> str:
        """``9000``, ``40000-40100`` or ``random``."""
        if not self.fixed:
            return "random"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


def _unique(hosts) -> tuple:
    return tuple(dict.fromkeys(hosts))


def plan(config) -> list:
    """Every listening endpoint of ``config``'s cluster, the scheduler's first, then each
    DC's server, bulk port and workers per host, in the file's order. O(DCs * workers)."""
    servers = {dc.name: dc.server_host for dc in config.dcs}
    sched = config.scheduler_reached_at
    everyone = _unique([*servers.values(),
                        *(dc.worker_host(i) for dc in config.dcs for i in range(dc.workers))])
    found = [Endpoint("scheduler", sched, config.scheduler_host, sched,
                      config.scheduler_port, config.scheduler_port, 1, everyone,
                      "every server and worker", "[scheduler] port")]
    for dc in config.dcs:
        here = servers[dc.name]
        others = [servers[d.name] for d in config.dcs if d.name != dc.name]
        remote_workers = _unique(dc.worker_host(i) for i in range(dc.workers)
                                 if dc.worker_host(i) != here)
        found.append(Endpoint(
            f"server {dc.name}", here, dc.host, here, dc.server_port, dc.server_port, 1,
            _unique([sched, *others, *remote_workers]),
            "the scheduler, the other DCs' servers" +
            (f", {dc.name}'s workers on other hosts" if remote_workers else ""),
            f"DC {dc.name!r} server_port"))
        if config.security.bulk and len(config.dcs) > 1:
            found.append(Endpoint(
                f"bulk {dc.name}", here, dc.host, here, dc.bulk_port, dc.bulk_port, 1,
                _unique(others), "the other DCs' servers (sealed chunks)",
                f"DC {dc.name!r} bulk_port"))
        low, high = dc.worker_ports or (0, 0)
        per_host: dict = {}
        for i in range(dc.workers):
            per_host.setdefault(dc.worker_host(i), []).append(i)
        for host, indices in per_host.items():
            found.append(Endpoint(
                f"workers {dc.name}", host, dc.worker_bind(indices[0]), host, low, high,
                len(indices), _unique([sched] + ([here] if host != here else [])),
                "the scheduler" + (f", the server of {dc.name}" if host != here else ""),
                f"DC {dc.name!r} worker_ports"))
    return found


def inbound_ports(endpoints, host: str) -> list:
    """The ``(low, high)`` port ranges ``host`` must accept connections on from other
    hosts (a firewall's list), sorted, once each; random ports are left out (see
    :func:`random_across_hosts`). O(endpoints)."""
    return sorted({(e.low, e.high) for e in endpoints
                   if e.host == host and e.fixed and any(d != host for d in e.dialers)})


def outbound(endpoints, host: str) -> list:
    """The endpoints the processes of ``host`` connect to on other hosts. O(endpoints)."""
    return [e for e in endpoints if host in e.dialers and e.host != host]


def random_across_hosts(endpoints) -> list:
    """The endpoints on a random port that processes of another host connect to: a
    firewall between those hosts would have to let every port through."""
    return [e for e in endpoints if not e.fixed and any(d != e.host for d in e.dialers)]
