"""The cluster file's ``[metrics]`` table: whether the long-lived processes (the scheduler
and every DC's server) serve Prometheus text at ``/metrics``, on which address and ports,
and where each says so for Prometheus's file-based discovery (docs/operations.md)::

    [metrics]
    host = "127.0.0.1"          # what every endpoint binds (default: loopback only)
    port = "9400-9409"          # 0: any free port; 9400: that port; "LOW-HIGH": the first
                                # free port of the range, on each host
    targets_dir = "targets"     # optional: each process writes its endpoint there as a
                                # file_sd JSON file (relative to the cluster file)

Without the table nothing is served (``netstorm-launch --metrics-port`` turns it on). No
port is derived from a node's id: each process takes the first free port of its range (or
any free port) and, with ``targets_dir``, writes where it is. Pure data; O(fields), the
host check O(DCs)."""
from __future__ import annotations

from dataclasses import dataclass

from .hosts import ANY_ADDRESS, resolve_host
from .limits import port_range

__all__ = ["FIELDS", "LOOPBACK", "MetricsConfig", "MetricsError", "crowded_host",
           "parse_port", "reached_host"]

LOOPBACK = "127.0.0.1"
FIELDS = ("host", "port", "targets_dir")


class MetricsError(ValueError):
    """A ``[metrics]`` setting (or ``--metrics-port``) that cannot be used; the text names
    the field and why."""


@dataclass(frozen=True)
class MetricsConfig:
    """``on``: endpoints are served; ``host``: the address they bind; ``ports``: ``(low,
    high)`` inclusive, ``(0, 0)`` for any free port; ``targets_dir``: where each process
    writes its file_sd entry ("": nowhere)."""

    on: bool = False
    host: str = LOOPBACK
    ports: tuple = (0, 0)
    targets_dir: str = ""

    @property
    def any_port(self) -> bool:
        return self.ports == (0, 0)

    @property
    def port_text(self) -> str:
        """``port`` as written back: ``"0"``, ``"9400"`` or ``"9400-9409"``."""
        low, high = self.ports
        return str(low) if low == high else f"{low}-{high}"

    def candidates(self) -> range:
        """The ports to try in turn (``range(0, 1)``: any free port)."""
        return range(self.ports[0], self.ports[1] + 1)

    def to_params(self) -> dict:
        """The ``[metrics]`` table (what :meth:`from_params` reads back equal)."""
        table = {"host": self.host, "port": self.port_text}
        if self.targets_dir:
            table["targets_dir"] = self.targets_dir
        return table

    @classmethod
    def from_params(cls, raw, where: str = "[metrics]") -> "MetricsConfig":
        """The ``[metrics]`` table ``raw`` (``where`` names it in errors): on, with its
        fields checked; an unknown field is refused."""
        if not isinstance(raw, dict):
            raise MetricsError(f"{where}: must be a table, got {raw!r}")
        for name in raw:
            if name not in FIELDS:
                raise MetricsError(f"{where}: unknown field {name!r}; known: "
                                   f"{', '.join(FIELDS)}")
        host = raw.get("host", LOOPBACK)
        if not isinstance(host, str):
            raise MetricsError(f"{where}: field 'host' must be str, got {host!r}")
        host = resolve_host(host, f"{where} host", MetricsError)
        ports = parse_port(raw.get("port", 0), f"{where} port")
        targets = raw.get("targets_dir", "")
        if not isinstance(targets, str):
            raise MetricsError(f"{where}: field 'targets_dir' must be str, got {targets!r}")
        return cls(on=True, host=host, ports=ports, targets_dir=targets)


def parse_port(value, where: str = "") -> tuple:
    """A port setting as ``(low, high)``: an int (0: any free port) or ``"LOW-HIGH"`` /
    ``"N"`` text; the error starts with ``where`` (the field; "" for a flag, which
    argparse names)."""
    label = f"{where}: " if where else ""
    ports = None if isinstance(value, bool) or not isinstance(value, (int, str)) else \
        port_range(str(value), f"{label}{value!r}: ", MetricsError,
                   " (0 alone: any free port)", any_free=True)
    if ports is None:
        raise MetricsError(f"{label}must be a port, 0 (any free port) or a range "
                           f"\"LOW-HIGH\" (e.g. \"9400-9409\"), got {value!r}")
    return ports


def crowded_host(metrics: MetricsConfig, scheduler_host: str, dcs) -> str:
    """Why ``metrics``' port range cannot serve every process of some host ("" if it
    can): the scheduler runs on ``scheduler_host``, each of ``dcs``' servers on its
    ``server_host``. A range of one port on a host running the scheduler and a server
    would stop the second to start. O(DCs)."""
    if not metrics.on or metrics.any_port:
        return ""
    processes = {scheduler_host: ["the scheduler"]}
    for dc in dcs:
        processes.setdefault(dc.server_host, []).append(f"the server of {dc.name!r}")
    size = metrics.ports[1] - metrics.ports[0] + 1
    for host, names in sorted(processes.items()):
        if len(names) > size:
            return (f"[metrics] port {metrics.port_text} holds {size} port(s), but {host} "
                    f"runs {len(names)} processes that serve metrics ({', '.join(names)}): "
                    f"give a range of at least {len(names)} ports, or 0 for any free port")
    return ""


def reached_host(metrics: MetricsConfig, process_host: str) -> str:
    """Where Prometheus reaches an endpoint bound to ``metrics.host`` by a process running
    on ``process_host``: the bound address, or the process's own for a wildcard."""
    return process_host if metrics.host in ANY_ADDRESS else metrics.host
