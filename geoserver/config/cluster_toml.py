"""Writing a cluster file: :func:`to_toml` renders a
:class:`~netstorm.geoserver.cluster.ClusterConfig` as TOML that
:func:`~netstorm.geoserver.cluster.load_cluster` reads back equal (the launchers hand their
processes a cluster file written here). Pure."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .hosts import SshConfig
from .keys import SCHEDULER_PRINCIPAL, SecurityConfig

if TYPE_CHECKING:
    from .cluster import ClusterConfig


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_toml(config: ClusterConfig) -> str:
    """Render ``config`` as a cluster file that :func:`load_cluster` reads back equal."""
    lines = ["[scheduler]", f'host = "{config.scheduler_host}"',
             f"port = {config.scheduler_port}"]
    if config.scheduler_advertise:
        lines.append(f'advertise = "{config.scheduler_advertise}"')
    if config.stats:
        lines.append(f"stats = {_toml_str(config.stats)}")
    lines.append("")
    for dc in config.dcs:
        lines += ["[[dc]]", f'name = "{dc.name}"', f'host = "{dc.host}"',
                  f"server_port = {dc.server_port}", f"workers = {dc.workers}"]
        if dc.advertise:
            lines.append(f'advertise = "{dc.advertise}"')
        if dc.worker_hosts:
            lines.append(f"worker_hosts = {_toml_value(list(dc.worker_hosts))}")
        lines.append("")
    for link in config.links:
        lines += ["[[link]]", f'a = "{link.a}"', f'b = "{link.b}"',
                  f"mbps_ab = {float(link.mbps_ab)}", f"mbps_ba = {float(link.mbps_ba)}"]
        if link.latency_ms:
            lines.append(f"latency_ms = {float(link.latency_ms)}")
        lines.append("")
    lines += ["[transport]", f"chunk_bytes = {config.chunk_bytes}",
              f"timeout_s = {config.timeout_s}", f"heartbeat_s = {config.heartbeat_s}",
              f"dead_after_s = {config.dead_after_s}", f"stall_s = {config.stall_s}",
              f"fuse_bytes = {config.fuse_bytes}", f"fuse_linger_s = {config.fuse_linger_s}",
              "",
              "[wan]", f'policy = "{config.policy}"',
              f"adapt = {str(config.adapt).lower()}",
              f"replan_threshold = {config.replan_threshold}",
              f"min_dwell_s = {config.min_dwell_s}",
              f"multipath = {str(config.multipath).lower()}",
              f"trees = \"{config.trees}\""]
    if config.hub:
        lines.append(f'hub = "{config.hub}"')
    if config.compression.on:
        lines += ["", "[compression]"] + [
            f"{k} = {_toml_value(v)}" for k, v in config.compression.to_params().items()]
    if config.sync.mode != "fsa":
        lines += ["", "[sync]"] + [f"{k} = {_toml_value(v)}"
                                   for k, v in config.sync.to_params().items()]
    if config.worker_restarts or config.resume or config.checkpoint or \
            config.server_restarts:
        lines += ["", "[recovery]", f"worker_restarts = {config.worker_restarts}",
                  f"cluster_restarts = {config.cluster_restarts}",
                  f"server_restarts = {config.server_restarts}"]
        for key in ("resume", "checkpoint"):
            if getattr(config, key):
                lines.append(f"{key} = {_toml_str(getattr(config, key))}")
    if config.ssh != SshConfig():
        lines += ["", "[ssh]"] + [f"{k} = {_toml_value(v)}"
                                  for k, v in config.ssh.to_params().items()]
    if config.emulation.on:
        lines += ["", "[emulation]"] + [f"{k} = {_toml_value(v)}"
                                        for k, v in config.emulation.to_params().items()]
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
    if security.secret_keys:
        lines.append(f"secret_keys = {_toml_str(security.secret_keys)}")
    if SCHEDULER_PRINCIPAL in keys:
        lines.append(f'scheduler_key = "{keys[SCHEDULER_PRINCIPAL]}"')
    dc_keys = [(dc, key) for dc, key in keys.items() if dc != SCHEDULER_PRINCIPAL]
    if dc_keys:
        lines += ["[security.dc_keys]"] + [f'{dc} = "{key}"' for dc, key in dc_keys]
    return lines
