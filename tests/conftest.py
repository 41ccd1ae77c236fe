"""The suite's two folders: tests/unit/ (one process, no sockets: `scripts/test.sh -m unit`)
and tests/cluster/ (processes, sockets, namespaces). Shared helpers are plain modules here:
launching.py (a whole cluster through scripts/launch.py), fakes.py, live_cluster.py, ..."""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
pytest_plugins = ["launching"]     # its fixtures (no_leftovers, ...) for every test


def pytest_collection_modifyitems(items):
    for item in items:
        folder = Path(item.path).resolve().relative_to(HERE).parts[0]
        if folder in ("unit", "cluster"):
            item.add_marker(getattr(pytest.mark, folder))
