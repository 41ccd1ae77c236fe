"""The cluster file: one human-written TOML file describing a whole netstorm cluster.

Example (``docs/cluster.example.toml`` has the commented version)::

    [scheduler]
    host = "127.0.0.1"
    port = 9000

    [[dc]]
    name = "eu"
    host = "127.0.0.1"      # address the DC's server binds and workers use
    server_port = 9100      # 0: any free port, reported to the scheduler
    workers = 2

    [[dc]]
    name = "us"
    host = "127.0.0.1"
    server_port = 9101
    workers = 2

    [transport]             # every field optional (defaults: geoserver/config/settings.py)
    chunk_bytes = 262144    # tensors larger than this travel as several chunks
    timeout_s = 120         # how long any node waits for a peer before a clear error
    heartbeat_s = 0.25      # how often every node tells the scheduler it is alive
    dead_after_s = 5        # a node silent this long is declared dead: the run aborts
                            # (also the scheduler: every node then stops, naming it)
    detect_floor_s = 1.0    # sooner: a node heard regularly is presumed dead after a
                            # deadline learnt from its beats, at least this (a killed
                            # one at once); dead_after_s bounds it; 0: off
    stall_s = 2             # a WAN link that moves nothing this long while data waits
                            # is reported stalled (treated as failed; see adapt)
    fuse_bytes = 65536      # a worker's requests of smaller keys travel together (0: never)
    fuse_linger_s = 0.001   # how long the first of them waits for others
    max_idle_s = 0          # a worker that sends nothing this long while the others wait
                            # on it or have finished fails the run, named (0: never)

    [wan]
    policy = "fapt"         # fapt: multi-root aggregation trees; star: one global server
    hub = "eu"              # star centre; default: the first DC
    adapt = false           # fapt: re-plan the trees from rates measured on the traffic
    replan_threshold = 0.2  # adapt: switch when the current policy is predicted this much
                            # slower than the best one under fresh estimates
    min_dwell_s = 10        # adapt: at least this long between two switches
    multipath = false       # fapt: idle links carry part of busy links' chunks via relays
    trees = "split"         # fapt: "split" lets a tree's total descend a broadcast tree of
                            # its own when the time model predicts it faster; "shared":
                            # every tree broadcasts along its aggregation edges

    [[link]]                # optional: the WAN links and their rates (Mbit/s). If given,
    a = "eu"                # trees use only these links (relaying through DCs); without
    b = "us"                # them every pair of DCs is a candidate link and the rates are
                            # measured at start-up (a few seconds)
    mbps = 100              # or mbps_ab / mbps_ba for the two directions
    latency_ms = 40         # optional: one-way delay, for planning (the time model)

    [security]              # written by `netstorm-launch keygen FILE` (docs/security.md)
    curve = true            # false: no encryption, no authentication (logs a warning)
    secret_keys = "keys"    # this host's secret keys (relative to this file)
    scheduler_key = "..."   # the scheduler's public key (Z85)
    [security.dc_keys]
    eu = "..."              # each DC's public key, shared by its server and workers
    us = "..."

The file is read once, at the edge of each process, into the frozen :class:`ClusterConfig`
that is passed down; nothing deeper reads files or the environment. This module reads a
whole file (:func:`parse_cluster`, :func:`load_cluster`) or builds a one-machine cluster
(:func:`pseudo_cluster`); the data is ``cluster_config``, each table's checks
``cluster_tables``, each field's ``cluster_fields``, a ``[[link]]`` is a ``links.Link``.
The settings servers and workers need travel from the scheduler as one
:class:`~netstorm.geoserver.config.settings.RuntimeSettings`, whose defaults are this file's.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .cluster_config import ClusterConfig, ClusterFileError, DataCenter
from .cluster_fields import known_fields, need, read_toml
from .cluster_tables import parse_dcs, parse_elastic, parse_links, parse_recovery, \
    parse_scheduler, \
    parse_security, parse_ssh, parse_status, parse_timeouts, parse_transport, parse_wan
from .ports import check_worker_ports, fixed_ports
from .compression import CompressionConfig, CompressionError
from .emulation import parse_emulation
from .limits import check_strings
from .metrics import MetricsConfig, MetricsError
from .links import Link
from .sync import SyncConfig, SyncError

__all__ = ["ClusterConfig", "ClusterFileError", "DataCenter", "Link", "absolute_paths",
           "load_cluster",
           "parse_cluster", "pseudo_cluster", "read_toml"]


def parse_cluster(data: dict, source: str = "<dict>") -> ClusterConfig:
    """Validate a parsed cluster table; every problem names ``source`` and the field (every
    string first, then the tables in the order of the file format above; the first problem
    is raised). O(size of the file + DCs x links)."""
    known_fields(data, "", source)
    check_strings(data, source, ClusterFileError)
    sched, sched_host, sched_port, sched_advertise = parse_scheduler(data, source)
    dcs = parse_dcs(data.get("dc"), source)
    seen = {dc.name for dc in dcs}
    bound = [(d.host, d.server_port) for d in dcs if d.server_port] + [(sched_host, sched_port)]
    bound += [(d.host, d.bulk_port) for d in dcs if d.bulk_port]
    if len(set(bound)) != len(bound):
        raise ClusterFileError(f"{source}: two processes are given the same host and port")
    check_worker_ports(dcs, fixed_ports(dcs, sched_advertise or sched_host, sched_port),
                       source)
    where = f"{source} [transport]"
    transport = known_fields(data.get("transport", {}), "transport", where)
    kwargs = parse_transport(transport, where)
    if "stats" in sched:
        kwargs["stats"] = need(sched, "stats", str, f"{source} [scheduler]")
    kwargs.update(parse_timeouts(transport, where))
    where = f"{source} [wan]"
    kwargs.update(parse_wan(known_fields(data.get("wan", {}), "wan", where), seen, where))
    kwargs["links"] = parse_links(data.get("link", []), seen, source)
    kwargs["security"] = parse_security(data.get("security", {}), seen, source)
    if "compression" in data:
        try:
            kwargs["compression"] = CompressionConfig.from_params(
                data["compression"], where=f"{source} [compression]")
        except CompressionError as exc:
            raise ClusterFileError(str(exc)) from None
    if "sync" in data:
        try:
            kwargs["sync"] = SyncConfig.from_params(data["sync"], where=f"{source} [sync]")
        except SyncError as exc:
            raise ClusterFileError(str(exc)) from None
    if "ssh" in data:
        kwargs["ssh"] = parse_ssh(data["ssh"], f"{source} [ssh]")
    if "emulation" in data:
        kwargs["emulation"] = parse_emulation(data["emulation"], seen, f"{source} [emulation]",
                                              ClusterFileError)
    if "metrics" in data:
        try:
            kwargs["metrics"] = MetricsConfig.from_params(data["metrics"],
                                                          where=f"{source} [metrics]")
        except MetricsError as exc:
            raise ClusterFileError(str(exc)) from None
    if "status" in data:
        kwargs["status"] = parse_status(data["status"], f"{source} [status]")
    where = f"{source} [recovery]"
    kwargs.update(parse_recovery(known_fields(data.get("recovery", {}), "recovery", where),
                                 where))
    where = f"{source} [elastic]"
    kwargs.update(parse_elastic(known_fields(data.get("elastic", {}), "elastic", where), where))
    return ClusterConfig(scheduler_host=sched_host, scheduler_port=sched_port, dcs=dcs,
                         scheduler_advertise=sched_advertise, source=source, **kwargs)


def load_cluster(path) -> ClusterConfig:
    """Read and validate the cluster file ``path``; its secret key folder is taken
    relative to the file's folder."""
    config = parse_cluster(read_toml(path, ClusterFileError, "cluster file"), source=str(path))
    return absolute_paths(config, Path(path).parent)


def absolute_paths(config: ClusterConfig, base) -> ClusterConfig:
    """``config`` with its relative paths (the secret key folder, ``resume``,
    ``checkpoint``, ``[metrics] targets_dir``) taken relative to the folder ``base``: a
    cluster file's own folder, or, for a cluster built in code before the launcher writes
    it elsewhere, the folder it runs in. O(1)."""
    def absolute(value: str) -> str:
        return value if not value or Path(value).is_absolute() else \
            str((Path(base) / value).resolve())

    config = replace(config, security=replace(
        config.security, secret_keys=absolute(config.security.secret_keys)),
        resume=absolute(config.resume), checkpoint=absolute(config.checkpoint))
    return replace(config, metrics=replace(config.metrics,
                                           targets_dir=absolute(config.metrics.targets_dir)))


def pseudo_cluster(dcs: int, workers_per_dc: int, scheduler_port: int,
                   host: str = "127.0.0.1", **transport) -> ClusterConfig:
    """A one-machine cluster: ``dcs`` DCs named dc0.. with servers on free ports."""
    if dcs < 1 or workers_per_dc < 1:
        raise ClusterFileError("need at least one DC and one worker per DC")
    return ClusterConfig(scheduler_host=host, scheduler_port=scheduler_port,
                         dcs=tuple(DataCenter(f"dc{i}", host, 0, workers_per_dc)
                                   for i in range(dcs)), source="<pseudo>", **transport)
