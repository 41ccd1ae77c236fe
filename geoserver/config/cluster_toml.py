"""Writing a cluster file: :func:`to_toml` renders a
:class:`~netstorm.geoserver.config.cluster.ClusterConfig` as TOML that
:func:`~netstorm.geoserver.config.cluster.load_cluster` reads back equal (the launchers hand their
processes a cluster file written here), :func:`security_toml` the ``[security]`` table
netstorm-keygen adds to a user's file. The text is made by ``tomli-w``, a library made for
writing TOML (it quotes keys and escapes strings as TOML wants), and read back with
``tomllib`` and validated before it is returned: what a process is handed is a file that
process accepts. Pure; O(size of the config)."""
from __future__ import annotations

import tomllib

import tomli_w

from .cluster import ClusterConfig, ClusterFileError, parse_cluster
from .hosts import SshConfig
from .keys import SCHEDULER_PRINCIPAL, SecurityConfig
from .settings import DEFAULT_AUDIT_EVERY

__all__ = ["checked_toml", "cluster_tables", "security_table", "security_toml", "to_toml"]


def _present(fields: dict) -> dict:
    """``fields`` without those whose value is None (their default applies when read)."""
    return {k: v for k, v in fields.items() if v is not None}


def cluster_tables(config: ClusterConfig) -> dict:
    """``config`` as the tables of a cluster file (what ``tomllib`` would read from it)."""
    data = {"scheduler": _present({"host": config.scheduler_host,
                                   "port": config.scheduler_port,
                                   "advertise": config.scheduler_advertise or None,
                                   "stats": config.stats or None}),
            "dc": [_present({"name": dc.name, "host": dc.host, "server_port": dc.server_port,
                             "workers": dc.workers, "advertise": dc.advertise or None,
                             "worker_hosts": list(dc.worker_hosts) or None,
                             "worker_ports": "-".join(map(str, dc.worker_ports)) or None,
                             "worker_advertise": list(dc.worker_advertise) or None,
                             "bulk_port": dc.bulk_port or None})
                   for dc in config.dcs]}
    if config.links:
        data["link"] = [_present({"a": link.a, "b": link.b, "mbps_ab": float(link.mbps_ab),
                                  "mbps_ba": float(link.mbps_ba),
                                  "latency_ms": float(link.latency_ms) or None})
                        for link in config.links]
    data["transport"] = {
        "chunk_bytes": config.chunk_bytes, "timeout_s": float(config.timeout_s),
        "heartbeat_s": float(config.heartbeat_s), "dead_after_s": float(config.dead_after_s),
        "stall_s": float(config.stall_s), "fuse_bytes": config.fuse_bytes,
        "detect_floor_s": float(config.detect_floor_s),
        "fuse_linger_s": float(config.fuse_linger_s), "dataplane": config.dataplane}
    if config.max_idle_s:       # 0 (never, the default) is left out
        data["transport"]["max_idle_s"] = float(config.max_idle_s)
    data["wan"] = _present({
        "policy": config.policy, "adapt": config.adapt,
        "replan_threshold": float(config.replan_threshold),
        "min_dwell_s": float(config.min_dwell_s), "multipath": config.multipath,
        "trees": config.trees, "hub": config.hub or None})
    if config.compression.on:
        data["compression"] = config.compression.to_params()
    if config.sync.mode != "fsa":
        data["sync"] = config.sync.to_params()
    if config.worker_restarts or config.resume or config.checkpoint or \
            config.server_restarts or config.scheduler_restarts or \
            config.audit_every != DEFAULT_AUDIT_EVERY:
        data["recovery"] = _present({
            "worker_restarts": config.worker_restarts,
            "cluster_restarts": config.cluster_restarts,
            "server_restarts": config.server_restarts,
            "audit_every": None if config.audit_every == DEFAULT_AUDIT_EVERY
            else config.audit_every,
            "scheduler_restarts": config.scheduler_restarts,
            "resume": config.resume or None, "checkpoint": config.checkpoint or None})
    if config.min_dcs:
        data["elastic"] = _present({"min_dcs": config.min_dcs,
                                    "rejoins": config.rejoins or None})
    if config.ssh != SshConfig():
        data["ssh"] = config.ssh.to_params()
    if config.emulation.on:
        data["emulation"] = config.emulation.to_params()
    if config.metrics.on:
        data["metrics"] = config.metrics.to_params()
    if config.status.to_params():
        data["status"] = config.status.to_params()
    data["security"] = security_table(config.security)
    return data


def to_toml(config: ClusterConfig, validate: bool = True) -> str:
    """``config`` as a cluster file that :func:`load_cluster` reads back equal: read back
    and checked to hold exactly the tables written, then validated here
    (:func:`checked_toml`). ``validate=False`` skips the last step, for a file whose host
    names resolve only where it will be used (Kubernetes Services' DNS names) and whose
    config was validated when it was built."""
    tables = cluster_tables(config)
    text = tomli_w.dumps(tables)
    if tomllib.loads(text) != tables:
        raise ClusterFileError(f"the cluster file written from {config.source} does not read "
                               f"back as written; please report this")
    return checked_toml(text, config.source) if validate else text


def checked_toml(text: str, source: str) -> str:
    """``text`` once it reads back (``tomllib``) as a valid cluster file; else
    :class:`ClusterFileError` naming ``source``, the config it was written from (that
    would be a bug of this writer, said before any process is handed the file)."""
    try:
        parse_cluster(tomllib.loads(text), source=f"the cluster file written from {source}")
    except tomllib.TOMLDecodeError as exc:
        raise ClusterFileError(f"the cluster file written from {source} is not valid TOML "
                               f"({exc}); please report this") from None
    return text


def security_table(security: SecurityConfig) -> dict:
    """The ``[security]`` table of ``security``: curve on or off, its bulk cipher and
    secret key folder when set, every principal's public key."""
    keys = security.keys
    table = _present({"curve": security.curve,
                      "bulk_cipher": security.bulk_cipher
                      if security.bulk_cipher != "aegis256" else None,
                      "secret_keys": security.secret_keys or None,
                      "scheduler_key": keys.get(SCHEDULER_PRINCIPAL)})
    dc_keys = {dc: key for dc, key in keys.items() if dc != SCHEDULER_PRINCIPAL}
    if dc_keys:
        table["dc_keys"] = dc_keys
    return table


def security_toml(security: SecurityConfig) -> str:
    """The ``[security]`` table of ``security`` as TOML text (its own tables only)."""
    return tomli_w.dumps({"security": security_table(security)})
