"""Prometheus metrics of one process (docs/operations.md): its ``/metrics`` endpoint, served
by prometheus_client's own HTTP server on a daemon thread, bound to the first free port of
the ``[metrics]`` range (or any free port), with its file_sd entry saying where it is
(:func:`serve_metrics`); and the families a custom collector builds at each scrape, every
series labelled with its process's ``role`` (and ``dc``) (:class:`Families`). The
collectors themselves are the server's (:mod:`netstorm.geoserver.server.metrics`) and the
scheduler's (:mod:`netstorm.scheduler.metrics`).

The process's loop never waits on the endpoint: a scrape runs the collectors on the
endpoint's thread, and they read the process's state as it is. Each process has its own
:class:`~prometheus_client.CollectorRegistry` (no global one): its collector and the
process's CPU and memory (``process_*``). A scrape is O(samples) here."""
from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

from ..config.metrics import MetricsConfig, MetricsError, reached_host

__all__ = ["Families", "MetricsEndpoint", "MetricsError", "link_name", "serve_metrics",
           "target_group", "write_targets"]


class MetricsEndpoint:
    """A running endpoint: where it listens, its file_sd entry (``targets_file``, None
    without ``targets_dir``); :meth:`close` stops it and removes the entry."""

    def __init__(self, server, thread, host: str, port: int, targets_file: Path | None):
        self._server, self._thread = server, thread
        self.host, self.port, self.targets_file = host, port, targets_file

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving (a scrape in progress ends first) and remove the file_sd entry."""
        self._server.shutdown()
        self._server.server_close()
        if self.targets_file is not None:
            try:
                self.targets_file.unlink()
            except OSError:
                pass


def serve_metrics(config: MetricsConfig, collector, name: str, process_host: str,
                  labels: dict) -> MetricsEndpoint | None:
    """Serve ``collector`` (and the process's ``process_*`` metrics) as ``config`` says;
    None when metrics are off. ``name`` names the file_sd entry
    (``netstorm-<name>.json``), ``process_host`` is where the process runs (the address
    written for a wildcard bind), ``labels`` the entry's target labels. Raises
    :class:`MetricsError` naming ``[metrics] port`` when every port of its range is
    taken, ``[metrics] host`` when that address cannot be bound here, ``[metrics]
    targets_dir`` when the entry cannot be written."""
    if not config.on:
        return None
    registry = CollectorRegistry()
    registry.register(collector)
    ProcessCollector(registry=registry)
    server = thread = None
    for port in config.candidates():
        try:
            server, thread = start_http_server(port, config.host, registry=registry)
            break
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise MetricsError(f"[metrics] host {config.host}: cannot serve metrics "
                                   f"there: {exc.strerror}") from None
    if server is None:
        taken = "is taken" if config.ports[0] == config.ports[1] else \
            "every port of the range is taken"
        raise MetricsError(f"[metrics] port {config.port_text}: {taken} on {config.host}; "
                           f"free one, give a wider range, or 0 for any free port")
    endpoint = MetricsEndpoint(server, thread, config.host, server.server_port, None)
    if config.targets_dir:
        group = target_group(f"{reached_host(config, process_host)}", endpoint.port, labels)
        try:
            endpoint.targets_file = write_targets(Path(config.targets_dir), name, group)
        except OSError as exc:
            endpoint.close()
            raise MetricsError(f"[metrics] targets_dir {config.targets_dir}: cannot write "
                               f"the targets file of {name}: {exc.strerror}") from None
    return endpoint


def target_group(host: str, port: int, labels: dict) -> list:
    """One endpoint as a Prometheus file_sd document: ``[{"targets": ["host:port"],
    "labels": {"netstorm_<label>": value}}]`` (prefixed, so they never clash with the
    series' own ``role`` and ``dc`` labels)."""
    host = f"[{host}]" if ":" in host else host
    return [{"targets": [f"{host}:{port}"],
             "labels": {f"netstorm_{k}": str(v) for k, v in sorted(labels.items())}}]


def write_targets(folder: Path, name: str, group: list) -> Path:
    """``group`` as ``folder/netstorm-<name>.json``, replaced atomically (Prometheus never
    reads half a file); the folder is made if missing."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"netstorm-{name}.json"
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".netstorm-{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(group, file)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def link_name(src: str, dst: str) -> str:
    """The ``link`` label of the direction ``src -> dst``: ``"src->dst"``."""
    return f"{src}->{dst}"


class Families:
    """The families of one scrape. ``base``: the labels every series carries (e.g.
    ``{"role": "server", "dc": "eu"}``)."""

    def __init__(self, base: dict):
        self.base = dict(base)
        self._families: dict = {}

    def _family(self, kind, name: str, text: str, labels: tuple):
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = kind(name, text,
                                                 labels=[*self.base, *labels])
        return family

    def gauge(self, name: str, text: str, value, **labels) -> None:
        """One gauge sample (skipped when ``value`` is None)."""
        if value is not None:
            self._family(GaugeMetricFamily, name, text, tuple(labels)).add_metric(
                [*map(str, self.base.values()), *map(str, labels.values())], float(value))

    def counter(self, name: str, text: str, value, **labels) -> None:
        """One counter sample (``name`` without ``_total``; skipped when ``value`` is
        None)."""
        if value is not None:
            self._family(CounterMetricFamily, name, text, tuple(labels)).add_metric(
                [*map(str, self.base.values()), *map(str, labels.values())], float(value))

    def all(self) -> list:
        return list(self._families.values())
