"""Writing a cluster file: :func:`to_toml` renders a
:class:`~netstorm.geoserver.config.cluster.ClusterConfig` as TOML that
:func:`~netstorm.geoserver.config.cluster.load_cluster` reads back equal (the launchers hand their
processes a cluster file written here). Pure."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .hosts import SshConfig
from .keys import SCHEDULER_PRINCIPAL, SecurityConfig

if TYPE_CHECKING:
    from .cluster import ClusterConfig

__all__ = ["security_toml", "to_toml"]


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _table(header: str, fields: dict) -> list:
    """One table (``[name]`` or ``[[name]]``) as lines of TOML; fields whose value is None
    are left out (their default applies when read back). O(fields)."""
    return [header] + [f"{k} = {_toml_value(v)}" for k, v in fields.items() if v is not None]


def to_toml(config: ClusterConfig) -> str:
    """Render ``config`` as a cluster file that :func:`load_cluster` reads back equal."""
    lines = _table("[scheduler]", {"host": config.scheduler_host, "port": config.scheduler_port,
                                   "advertise": config.scheduler_advertise or None,
                                   "stats": config.stats or None}) + [""]
    for dc in config.dcs:
        lines += _table("[[dc]]", {
            "name": dc.name, "host": dc.host, "server_port": dc.server_port,
            "workers": dc.workers, "advertise": dc.advertise or None,
            "worker_hosts": list(dc.worker_hosts) or None,
            "worker_ports": "-".join(map(str, dc.worker_ports)) or None,
            "worker_advertise": list(dc.worker_advertise) or None,
            "bulk_port": dc.bulk_port or None}) + [""]
    for link in config.links:
        lines += _table("[[link]]", {
            "a": link.a, "b": link.b, "mbps_ab": float(link.mbps_ab),
            "mbps_ba": float(link.mbps_ba),
            "latency_ms": float(link.latency_ms) if link.latency_ms else None}) + [""]
    lines += _table("[transport]", {
        "chunk_bytes": config.chunk_bytes, "timeout_s": config.timeout_s,
        "heartbeat_s": config.heartbeat_s, "dead_after_s": config.dead_after_s,
        "stall_s": config.stall_s, "fuse_bytes": config.fuse_bytes,
        "fuse_linger_s": config.fuse_linger_s, "dataplane": config.dataplane}) + [""]
    lines += _table("[wan]", {
        "policy": config.policy, "adapt": config.adapt,
        "replan_threshold": config.replan_threshold, "min_dwell_s": config.min_dwell_s,
        "multipath": config.multipath, "trees": config.trees, "hub": config.hub or None})
    if config.compression.on:
        lines += [""] + _table("[compression]", config.compression.to_params())
    if config.sync.mode != "fsa":
        lines += [""] + _table("[sync]", config.sync.to_params())
    if config.worker_restarts or config.resume or config.checkpoint or \
            config.server_restarts:
        lines += [""] + _table("[recovery]", {
            "worker_restarts": config.worker_restarts,
            "cluster_restarts": config.cluster_restarts,
            "server_restarts": config.server_restarts,
            "resume": config.resume or None, "checkpoint": config.checkpoint or None})
    if config.ssh != SshConfig():
        lines += [""] + _table("[ssh]", config.ssh.to_params())
    if config.emulation.on:
        lines += [""] + _table("[emulation]", config.emulation.to_params())
    lines += security_toml(config.security)
    return "\n".join(lines) + "\n"


def _toml_value(value) -> str:
    """A string, number, bool, list or flat table as TOML."""
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_str(k)} = {_toml_value(v)}"
                               for k, v in value.items()) + "}"
    return repr(value)


def security_toml(security: SecurityConfig) -> list:
    """The ``[security]`` table of ``security`` as lines of TOML."""
    keys = security.keys
    lines = ["", "[security]", f"curve = {str(security.curve).lower()}"]
    if security.bulk_cipher != "aegis256":
        lines.append(f"bulk_cipher = {_toml_str(security.bulk_cipher)}")
    if security.secret_keys:
        lines.append(f"secret_keys = {_toml_str(security.secret_keys)}")
    if SCHEDULER_PRINCIPAL in keys:
        lines.append(f'scheduler_key = "{keys[SCHEDULER_PRINCIPAL]}"')
    dc_keys = [(dc, key) for dc, key in keys.items() if dc != SCHEDULER_PRINCIPAL]
    if dc_keys:
        lines += ["[security.dc_keys]"] + [f'{dc} = "{key}"' for dc, key in dc_keys]
    return lines
