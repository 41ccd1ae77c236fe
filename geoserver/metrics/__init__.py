"""Prometheus metrics of a running process (docs/operations.md): its ``/metrics`` endpoint
and file_sd entry (``endpoint``), the families a collector builds (``families``) and a DC
server's collector (``server``), which reads the server's parts when scraped without
importing them. The scheduler's collector is :mod:`netstorm.scheduler.metrics`.

Imports only :mod:`netstorm.geoserver.config` (and ``prometheus_client``)."""

__all__ = ["MAY_IMPORT"]

MAY_IMPORT = ("config",)
