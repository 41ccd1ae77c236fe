"""Reading each table of a cluster file: ``[scheduler]``, the ``[[dc]]`` tables,
``[transport]``, ``[wan]``, the ``[[link]]`` tables, ``[security]``, ``[ssh]`` and
``[recovery]`` (``[compression]``, ``[sync]`` and ``[emulation]`` are read by their own
modules). Each function checks one table and returns what it holds, as
:class:`~netstorm.geoserver.config.cluster_config.ClusterConfig` fields; every problem names
the file and the field. Pure; each is O(fields), the link and DC checks O(links + DCs)."""
from __future__ import annotations

from dataclasses import replace

from .cluster_config import ClusterFileError, DataCenter
from .cluster_fields import advertise, bounded, host, known_fields, need
from .hosts import SshConfig
from .hosts import parse_ssh as parse_ssh_table
from .keys import BULK_CIPHERS, SCHEDULER_PRINCIPAL, SecurityConfig, SecurityError, check_key
from .limits import check_dc_name
from .links import Link
from .settings import DATAPLANES
from .status import StatusConfig
from .ports import check_worker_addresses, port_fields

__all__ = ["POLICIES", "TREE_KINDS", "parse_dcs", "parse_elastic", "parse_links",
           "parse_recovery",
           "parse_scheduler", "parse_security", "parse_ssh", "parse_status", "parse_timeouts",
           "parse_transport", "parse_wan"]

POLICIES = ("star", "fapt")
TREE_KINDS = ("split", "shared")   # [wan] trees


def parse_scheduler(data: dict, source: str) -> tuple:
    """``[scheduler]``: (the table, its host, port, advertised address)."""
    sched = data.get("scheduler")
    if not isinstance(sched, dict):
        raise ClusterFileError(f"{source}: missing [scheduler] table")
    where = f"{source} [scheduler]"
    known_fields(sched, "scheduler", where)
    sched_host = host(need(sched, "host", str, where), where)
    sched_port = bounded(sched, "port", where, "scheduler_port")
    return sched, sched_host, sched_port, advertise(sched, sched_host, where)


def parse_dcs(raw_dcs, source: str) -> tuple:
    """The ``[[dc]]`` tables: a tuple of :class:`DataCenter`, at least one, names unique."""
    if not isinstance(raw_dcs, list) or not raw_dcs:
        raise ClusterFileError(f"{source}: no [[dc]] tables; a cluster needs at least one DC")
    dcs, seen = [], set()
    for i, raw in enumerate(raw_dcs):
        where = f"{source} [[dc]] #{i + 1}"
        name = check_dc_name(need(known_fields(raw, "dc", where), "name", str, where), where,
                             ClusterFileError)
        if name in seen:
            raise ClusterFileError(f"{where}: duplicate DC name {name!r}")
        seen.add(name)
        where = f"{source} DC {name!r}"
        workers = bounded(raw, "workers", where)
        bind = host(need(raw, "host", str, where), where)
        hosts = _worker_hosts(raw, workers, where)
        dcs.append(DataCenter(name=name, host=bind,
                              server_port=bounded(raw, "server_port", where),
                              workers=workers, advertise=advertise(raw, bind, where),
                              worker_hosts=hosts, **port_fields(raw, workers, hosts, where)))
        check_worker_addresses(dcs[-1], where)
    return tuple(dcs)


def _worker_hosts(raw: dict, workers: int, where: str) -> tuple:
    """A DC's ``worker_hosts``: the hosts its workers run on, in turn (a wildcard binds
    every interface, once ``worker_advertise`` says where they are reached)."""
    if "worker_hosts" not in raw:
        return ()
    hosts = raw["worker_hosts"]
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise ClusterFileError(f"{where}: worker_hosts must be a non-empty list of host "
                               f"addresses, got {hosts!r}")
    if len(hosts) > workers:
        raise ClusterFileError(f"{where}: {len(hosts)} worker_hosts for {workers} worker(s): "
                               f"a host would run none")
    resolved = tuple(host(h, f"{where} worker_hosts") for h in hosts)
    if len(set(resolved)) != len(resolved):
        raise ClusterFileError(f"{where}: worker_hosts lists a host twice")
    return resolved


def parse_transport(transport: dict, where: str) -> dict:
    """``[transport]`` (``where`` names it): the fields it sets."""
    kwargs = {key: bounded(transport, key, where)
              for key in ("chunk_bytes", "fuse_bytes", "fuse_linger_s") if key in transport}
    if "dataplane" in transport:
        kwargs["dataplane"] = need(transport, "dataplane", str, where)
        if kwargs["dataplane"] not in DATAPLANES:
            raise ClusterFileError(f"{where}: dataplane must be one of "
                                   f"{', '.join(map(repr, DATAPLANES))}, got "
                                   f"{kwargs['dataplane']!r}")
    return kwargs


def parse_timeouts(transport: dict, where: str) -> dict:
    """``[transport]``'s durations (``where`` names it): the fields it sets, each within
    ``limits.BOUNDS`` (a millisecond to a day)."""
    return {key: bounded(transport, key, where)
            for key in ("timeout_s", "heartbeat_s", "dead_after_s", "stall_s", "max_idle_s",
                        "detect_floor_s")
            if key in transport}


def parse_wan(wan: dict, dcs: set, where: str) -> dict:
    """``[wan]`` (``where`` names it; ``dcs``: the declared DC names): the fields it sets."""
    kwargs = {}
    if "policy" in wan:
        kwargs["policy"] = need(wan, "policy", str, where)
        if kwargs["policy"] not in POLICIES:
            raise ClusterFileError(f"{where}: unknown policy {kwargs['policy']!r}; "
                                   f"known: {', '.join(POLICIES)}")
    if "trees" in wan:
        kwargs["trees"] = need(wan, "trees", str, where)
        if kwargs["trees"] not in TREE_KINDS:
            raise ClusterFileError(f"{where}: trees must be one of {', '.join(TREE_KINDS)}, "
                                   f"got {kwargs['trees']!r}")
    if "hub" in wan:
        kwargs["hub"] = need(wan, "hub", str, where)
        if kwargs["hub"] not in dcs:
            raise ClusterFileError(f"{where}: hub {kwargs['hub']!r} is not a declared DC")
    for key in ("adapt", "multipath"):
        if key in wan:
            kwargs[key] = need(wan, key, bool, where)
    for key in ("replan_threshold", "min_dwell_s"):
        if key in wan:
            kwargs[key] = bounded(wan, key, where)
    return kwargs


def parse_links(raw_links, dcs: set, source: str) -> tuple:
    """The ``[[link]]`` tables: a tuple of :class:`Link` between declared DCs, each pair once.
    O(links)."""
    if not isinstance(raw_links, list):
        raise ClusterFileError(f"{source}: 'link' must be an array of tables [[link]]")
    links, pairs = [], set()
    for i, raw in enumerate(raw_links):
        where = f"{source} [[link]] #{i + 1}"
        known_fields(raw, "link", where)
        a, b = need(raw, "a", str, where), need(raw, "b", str, where)
        for end in (a, b):
            if end not in dcs:
                raise ClusterFileError(f"{where}: unknown DC {end!r}")
        if a == b:
            raise ClusterFileError(f"{where}: a link needs two different DCs")
        if frozenset((a, b)) in pairs:
            raise ClusterFileError(f"{where}: duplicate link {a}-{b}")
        pairs.add(frozenset((a, b)))
        if "mbps" in raw:
            ab = ba = bounded(raw, "mbps", where)
        else:
            ab, ba = bounded(raw, "mbps_ab", where), bounded(raw, "mbps_ba", where)
        latency = bounded(raw, "latency_ms", where) if "latency_ms" in raw else 0.0
        links.append(Link(a, b, ab, ba, latency))
    return tuple(links)


def parse_security(raw, dcs: set, source: str) -> SecurityConfig:
    """``[security]``: curve on or off, the secret key folder, every principal's public key
    (all of them or none; no key shared)."""
    where = f"{source} [security]"
    known_fields(raw, "security", where)
    curve = need(raw, "curve", bool, where) if "curve" in raw else True
    secret_keys = need(raw, "secret_keys", str, where) if "secret_keys" in raw else ""
    bulk_cipher = need(raw, "bulk_cipher", str, where) if "bulk_cipher" in raw else "aegis256"
    if bulk_cipher not in BULK_CIPHERS:
        raise ClusterFileError(f"{where}: bulk_cipher must be one of "
                               f"{', '.join(map(repr, BULK_CIPHERS))}, not {bulk_cipher!r}")
    keys = {}
    try:
        if "scheduler_key" in raw:
            keys[SCHEDULER_PRINCIPAL] = check_key(raw["scheduler_key"],
                                                  f"{where} scheduler_key").decode()
        dc_keys = raw.get("dc_keys", {})
        if not isinstance(dc_keys, dict):
            raise ClusterFileError(f"{where}: dc_keys must be a table [security.dc_keys]")
        for dc, key in dc_keys.items():
            if dc not in dcs:
                raise ClusterFileError(f"{where}: dc_keys names unknown DC {dc!r}")
            keys[dc] = check_key(key, f"{where} dc_keys.{dc}").decode()
    except SecurityError as exc:
        raise ClusterFileError(str(exc)) from exc
    if keys and set(keys) != dcs | {SCHEDULER_PRINCIPAL}:
        missing = sorted(dcs - set(keys)) + (["the scheduler"] if SCHEDULER_PRINCIPAL
                                             not in keys else [])
        raise ClusterFileError(f"{where}: no public key for {', '.join(missing)}")
    if len(set(keys.values())) != len(keys):
        raise ClusterFileError(f"{where}: two principals share one public key")
    return SecurityConfig(curve=curve, public_keys=tuple(sorted(keys.items())),
                          secret_keys=secret_keys, bulk_cipher=bulk_cipher)


def parse_ssh(raw, where: str) -> SshConfig:
    """``[ssh]``, its aliases' host names resolved."""
    ssh = parse_ssh_table(raw, where, ClusterFileError)
    aliases = tuple(sorted((host(a, f"{where} aliases"), d) for a, d in ssh.aliases))
    return replace(ssh, aliases=aliases)


def parse_recovery(recovery: dict, where: str) -> dict:
    """``[recovery]`` (``where`` names it): the fields it sets."""
    kwargs = {}
    for key in ("worker_restarts", "cluster_restarts", "server_restarts", "audit_every",
                "scheduler_restarts"):
        if key in recovery:
            kwargs[key] = bounded(recovery, key, where)
    for key in ("resume", "checkpoint"):
        if key in recovery:
            kwargs[key] = need(recovery, key, str, where)
    return kwargs


def parse_elastic(elastic: dict, where: str) -> dict:
    """``[elastic]`` (``where`` names it): ``min_dcs``, the fewest DCs the run goes on with,
    and ``rejoins``, how often departed DCs may come back; whether they fit the cluster is
    :func:`~netstorm.geoserver.config.elastic.elastic_problem`."""
    return {key: bounded(elastic, key, where) for key in ("min_dcs", "rejoins")
            if key in elastic}


def parse_status(raw, where: str) -> StatusConfig:
    """``[status]`` (``where`` names it; ``config.status``): an unknown field, a port outside
    1..65535, a host that does not resolve or a count below 1 is an error naming ``where``
    and the field."""
    table = known_fields(raw, "status", where)
    kwargs = {key: bounded(table, key, where, f"status_{key}")
              for key in ("port", "total_steps", "samples_per_step") if key in table}
    if "host" in table:
        kwargs["host"] = host(need(table, "host", str, where), where)
    return StatusConfig(**kwargs)
