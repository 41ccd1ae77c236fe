"""The cluster file's ``[status]`` table: where the scheduler serves its live status page
and ``/status.json`` (read by ``netstorm-status``), and what the script declared about its
length (for progress and an ETA). Off unless a port is given; bound to loopback unless a
host is given (docs/operations.md, *Status page*).

    [status]
    port = 8080             # serve http://HOST:8080/ and /status.json (no port: off)
    host = "127.0.0.1"      # the address it binds (default loopback)
    total_steps = 5000      # the script's optimizer steps in all: progress and an ETA
    samples_per_step = 256  # samples the whole cluster takes per step: samples done

Pure data: ``config.cluster_tables.parse_status`` checks the table, each problem naming the
file and the field; :meth:`StatusConfig.to_params` writes it back (``config.cluster_toml``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["DEFAULT_STATUS_HOST", "StatusConfig", "WILDCARDS"]

DEFAULT_STATUS_HOST = "127.0.0.1"
WILDCARDS = ("0.0.0.0", "::", "")      # bound to every interface: reached at another address


@dataclass(frozen=True)
class StatusConfig:
    """``port`` 0: no status page (the default). ``total_steps``/``samples_per_step`` 0:
    not declared (no ETA, no sample count)."""

    port: int = 0
    host: str = DEFAULT_STATUS_HOST
    total_steps: int = 0
    samples_per_step: int = 0

    @property
    def on(self) -> bool:
        return self.port != 0

    def reached_at(self, scheduler_host: str) -> str:
        """The host a client asks: ``host``, or the scheduler's address when ``host`` binds
        every interface."""
        return scheduler_host if self.host in WILDCARDS else self.host

    def overridden(self, port=None, total_steps=None) -> "StatusConfig":
        """These settings with the launcher's ``--status-port``/``--total-steps`` (None:
        not given) applied; the host stays."""
        changes = {k: v for k, v in (("port", port), ("total_steps", total_steps))
                   if v is not None}
        return replace(self, **changes)

    def to_params(self) -> dict:
        """The ``[status]`` table that reads back as this config (defaults left out)."""
        table = {"port": self.port, "host": self.host, "total_steps": self.total_steps,
                 "samples_per_step": self.samples_per_step}
        defaults = StatusConfig()
        return {k: v for k, v in table.items() if v != getattr(defaults, k)}

