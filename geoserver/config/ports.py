"""The ports and addresses of a DC's workers in a cluster file (``[[dc]]``'s
``worker_ports`` and ``worker_advertise``) and the checks that keep a host's fixed ports
apart: a worker binding a port of its range must never take a port another process of its
host binds. docs/launch.md, "Networking", lists every port. Pure; each check is
O(fields), :func:`check_worker_ports` O(workers + DCs^2)."""
from __future__ import annotations


from .cluster_config import ClusterFileError, DataCenter
from .cluster_fields import bounded, host, need
from .hosts import ANY_ADDRESS
from .limits import port_range

__all__ = ["check_worker_addresses", "check_worker_ports", "fixed_ports", "port_fields",
           "worker_advertise", "worker_ports"]



def port_fields(raw: dict, workers: int, hosts: tuple, where: str) -> dict:
    """A ``[[dc]]`` table's ``worker_ports``, ``worker_advertise`` and ``bulk_port`` as
    :class:`DataCenter` fields (``hosts``: its resolved ``worker_hosts``)."""
    per_host = -(-workers // max(1, len(hosts)))        # the most workers on one host
    return {"worker_ports": worker_ports(raw, per_host, where),
            "worker_advertise": worker_advertise(raw, hosts, where),
            "bulk_port": bounded(raw, "bulk_port", where, "server_port")
            if "bulk_port" in raw else 0}


def worker_ports(raw: dict, per_host: int, where: str) -> tuple:
    """A DC's ``worker_ports = "LOW-HIGH"`` (or one port, ``"40000"``) as ``(low, high)``,
    (): absent (any free port). Each worker host runs up to ``per_host`` of the DC's
    workers, each binding its own port of the range."""
    if "worker_ports" not in raw:
        return ()
    text = need(raw, "worker_ports", str, where)
    ports = port_range(text, f"{where}: worker_ports {text!r}: ", ClusterFileError)
    if ports is None:
        raise ClusterFileError(f"{where}: worker_ports must be a port range \"LOW-HIGH\" "
                               f"(e.g. \"40000-40100\"), got {text!r}")
    low, high = ports
    if high - low + 1 < per_host:
        raise ClusterFileError(f"{where}: worker_ports {text!r} holds {high - low + 1} "
                               f"port(s), but a host runs {per_host} of this DC's workers, "
                               f"one port each: widen the range")
    return low, high


def worker_advertise(raw: dict, hosts: tuple, where: str) -> tuple:
    """A DC's ``worker_advertise``: where the other nodes reach its workers, one address
    (its workers on one host) or a list parallel to ``worker_hosts``; (): their bind
    address."""
    if "worker_advertise" not in raw:
        return ()
    value = raw["worker_advertise"]
    given = [value] if isinstance(value, str) else value
    if not isinstance(given, list) or not given or not all(isinstance(a, str) for a in given):
        raise ClusterFileError(f"{where}: worker_advertise must be a host address or a list "
                               f"of them, got {value!r}")
    if len(given) != max(1, len(hosts)):
        raise ClusterFileError(f"{where}: worker_advertise gives {len(given)} address(es) "
                               f"for {max(1, len(hosts))} worker host(s): give one per "
                               f"entry of worker_hosts, in its order")
    return tuple(host(a, f"{where} worker_advertise") for a in given)


def fixed_ports(dcs: tuple, scheduler_host: str, scheduler_port: int) -> list:
    """Every fixed port a cluster's processes bind, as ``(host, port, what)``, the host
    being where the process runs (its placement). O(DCs)."""
    fixed = [(scheduler_host, scheduler_port, "the scheduler")]
    for dc in dcs:
        fixed += [(dc.server_host, p, f"the server of {dc.name!r} ({what})")
                  for p, what in ((dc.server_port, "server_port"), (dc.bulk_port, "bulk_port"))
                  if p]
    return fixed


def check_worker_ports(dcs: tuple, fixed: list, source: str) -> None:
    """On each host, the DCs' ``worker_ports`` ranges neither overlap each other nor hold a
    fixed port bound there (``fixed``: ``(host, port, what)``): a worker could take it
    first. Hosts are compared as the processes' placement. O(workers + DCs^2)."""
    ranges: dict = {}      # host -> {dc name: (low, high)}
    for dc in dcs:
        if dc.worker_ports:
            for i in range(dc.workers):
                ranges.setdefault(dc.worker_host(i), {})[dc.name] = dc.worker_ports
    for where, held in ranges.items():
        named = sorted(held.items())
        for k, (a, (lo_a, hi_a)) in enumerate(named):
            for b, (lo_b, hi_b) in named[k + 1:]:
                if lo_a <= hi_b and lo_b <= hi_a:
                    raise ClusterFileError(
                        f"{source}: DC {a!r} and DC {b!r} both run workers on {where} with "
                        f"overlapping worker_ports ({lo_a}-{hi_a}, {lo_b}-{hi_b}): give each "
                        f"DC its own range on a shared host")
            for address, fixed_port, what in fixed:
                if address == where and lo_a <= fixed_port <= hi_a:
                    raise ClusterFileError(
                        f"{source} DC {a!r}: worker_ports {lo_a}-{hi_a} holds port "
                        f"{fixed_port}, which {what} binds on {where}")


def check_worker_addresses(dc: DataCenter, where: str) -> None:
    """Every worker host of ``dc`` is reached at an address peers can dial: a wildcard
    bind (``0.0.0.0``) needs ``worker_advertise``."""
    for i in range(len(dc.worker_hosts) or 1):
        bind, reached = dc.worker_bind(i), dc.worker_host(i)
        if reached not in ANY_ADDRESS:
            continue
        if bind == reached:
            raise ClusterFileError(f"{where}: worker host {bind!r} binds every interface: "
                                   f"give worker_advertise, where the other nodes reach "
                                   f"these workers")
        raise ClusterFileError(f"{where}: worker_advertise {reached!r} is not an address "
                               f"peers can reach")
