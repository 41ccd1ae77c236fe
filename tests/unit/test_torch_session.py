"""netstorm.torch.session: the session's identity, the torch variables init sets, keys."""
import sys

import pytest

from netstorm.geoserver.worker.settings import KVStoreError
from netstorm.torch import TorchSessionError, init
from torch_fakes import Hub


def test_init_sets_torchs_variables_from_the_clusters_ranks(monkeypatch):
    hub = Hub(4, dcs=2)
    environ = {"NETSTORM_SCHEDULER": "tcp://127.0.0.1:1", "NETSTORM_DC": "dc1"}
    seen = []
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr("atexit.register", lambda f: None)
    session = init(environ, client_factory=lambda s: seen.append(s) or hub.clients[3])
    assert seen[0].dc == "dc1"
    assert {k: environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")} \
        == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert (session.rank, session.size, session.dc) == (3, 4, "dc1")
    sys.excepthook(ValueError, ValueError("boom"), None)
    assert hub.clients[3].closed == (False, "ValueError: boom")


def test_init_outside_the_launcher_says_how_to_start_workers():
    with pytest.raises(KVStoreError, match="NETSTORM_SCHEDULER, NETSTORM_DC not set"):
        init({}, client_factory=lambda s: None)


def test_keys_are_handed_out_in_order_and_not_after_close():
    session = Hub(1, dcs=1).sessions()[0]
    assert session.new_keys(3) == range(0, 3) and session.new_keys(2) == range(3, 5)
    with session:
        pass
    assert session.client.closed == (True, "")
    with pytest.raises(TorchSessionError, match="closed"):
        session.new_keys(1)


def test_the_package_imports_neither_mxnet_nor_the_plug_in_nor_the_server():
    """Read with ast, as tests/unit/test_import_rules.py reads the engine: netstorm.torch
    stands on the worker client alone."""
    import ast
    from pathlib import Path
    import netstorm.torch
    found = set()
    for path in Path(netstorm.torch.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                found.add(node.module)
    forbidden = ("mxnet", "netstorm.kvstore", "netstorm.geoserver.server", "netstorm.scheduler",
                 "netstorm.launcher", "netstorm.bench", "netstorm.wan")
    assert not [m for m in found if m.startswith(forbidden)], found
    assert "netstorm.geoserver.worker.client" in found
