"""The suite's two folders: tests/unit/ (one process, no sockets: `scripts/test.sh -m unit`)
and tests/cluster/ (processes, sockets, namespaces). Shared helpers are plain modules here:
launching.py (a whole cluster through scripts/launch.py), fakes.py, live_cluster.py, ..."""
from __future__ import annotations

from pathlib import Path

import pytest

from launching import no_leftovers  # noqa: F401  (the fixture, for every test module)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        folder = Path(item.path).resolve().relative_to(HERE).parts[0]
        if folder in ("unit", "cluster"):
            item.add_marker(getattr(pytest.mark, folder))
