"""The cluster file and every setting, as typed data: read and checked once at the edge of
each process (``config.cluster``; the data in ``cluster_config``, the checks of each table
and field in ``cluster_tables`` and ``cluster_fields``, the bounds the file and the command
lines share in ``limits``, the one link type in ``links``), written back for child processes
(``cluster_toml``, with tomli-w), the keys (``keys``), hosts and ``[ssh]``, the runtime
settings every node is told (``settings``), the sync, compression and emulation settings,
how a process tells the launcher why it stopped (``exit_reasons``), and an entry point's
last resort for an unexpected error (``uncaught``).

Pure data and files: it never opens a socket and imports no other part of netstorm
(checked by tests/unit/test_import_rules.py from ``MAY_IMPORT``)."""

__all__ = ["MAY_IMPORT"]

MAY_IMPORT = ()
