"""The layering rules of docs/architecture.md, checked from the imports themselves (read with
``ast``, nothing is imported): each folder of ``geoserver/`` declares in its ``__init__.py``
which of its siblings it may import (``MAY_IMPORT``); the worker and the server never import
each other; the transport imports nothing above it; the settings never import sockets; the
engine (``geoserver/``) never imports the plug-in, the scheduler or the tools."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GEOSERVER = REPO / "geoserver"
FOLDERS = {"netstorm.geoserver": GEOSERVER, "netstorm.kvstore": REPO / "kvstore",
           "netstorm.scheduler": REPO / "scheduler", "netstorm": REPO / "netstorm"}


def module_name(path: Path) -> str:
    for package, folder in sorted(FOLDERS.items(), key=lambda kv: -len(str(kv[1]))):
        if path.is_relative_to(folder):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise AssertionError(path)


def imports_of(path: Path, source: str | None = None) -> set:
    """Every ``netstorm`` module ``path`` (or ``source``, as if it were there) imports; a name
    imported from a package counts as the submodule it may be."""
    name, found = module_name(path), set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    source = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m == "netstorm" or m.startswith("netstorm.")}


def declared_rules() -> dict:
    """folder (as a module name) -> the sibling folders it may import, from each
    ``__init__.py``'s ``MAY_IMPORT``."""
    rules = {}
    for init in GEOSERVER.rglob("__init__.py"):
        if init.parent == GEOSERVER:
            continue
        tree = ast.parse(init.read_text())
        values = [node.value for node in tree.body if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", "") == "MAY_IMPORT" for t in node.targets)]
        assert len(values) == 1, f"{init}: declares no MAY_IMPORT"
        rules[module_name(init)] = set(ast.literal_eval(values[0]))
    return rules


def folder_of(module: str, rules: dict) -> str | None:
    """The innermost folder with rules that holds ``module``."""
    owners = [f for f in rules if module == f or module.startswith(f + ".")]
    return max(owners, key=len) if owners else None


def top_folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["netstorm", "geoserver"] else None


def python_files(folder: Path):
    return sorted(p for p in folder.rglob("*.py") if "third_party" not in p.parts)


def test_every_folder_of_geoserver_declares_its_job_and_what_it_may_import():
    rules = declared_rules()
    assert {"netstorm.geoserver.core", "netstorm.geoserver.config", "netstorm.geoserver.policy",
            "netstorm.geoserver.worker", "netstorm.geoserver.server",
            "netstorm.geoserver.server.wan", "netstorm.geoserver.compression",
            "netstorm.geoserver.model"} <= set(rules)
    for init in GEOSERVER.rglob("__init__.py"):
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init}: says no job"
    # the rules themselves: the transport and the settings sit at the bottom; the worker
    # and the server never import each other
    assert rules["netstorm.geoserver.config"] == set()
    assert rules["netstorm.geoserver.core"] <= {"config", "policy"}
    assert "server" not in rules["netstorm.geoserver.worker"]
    assert "worker" not in rules["netstorm.geoserver.server"]


def check_module(path: Path, source: str | None = None) -> None:
    rules, me = declared_rules(), module_name(path)
    mine = folder_of(me, rules)
    for target in imports_of(path, source):
        assert target.startswith("netstorm.geoserver") or target == "netstorm.geoserver", \
            f"{me} imports {target}: the engine never imports the plug-in, scheduler or tools"
        if mine is None:            # the process edges (cli, __main__) may use everything
            continue
        theirs = folder_of(target, rules)
        if theirs is None or theirs == mine or theirs.startswith(mine + "."):
            continue
        if mine.startswith(theirs + "."):       # server.wan -> server's own modules
            assert False, f"{me} imports {target}: {mine} never imports the rest of {theirs}"
        assert top_folder(target) in rules[mine], \
            f"{me} imports {target}, but {mine} may import only {sorted(rules[mine])}"


@pytest.mark.parametrize("path", python_files(GEOSERVER), ids=lambda p: str(p.relative_to(REPO)))
def test_geoserver_modules_import_only_what_their_folder_allows(path):
    check_module(path)


@pytest.mark.parametrize("folder,forbidden", [
    ("kvstore", ("netstorm.geoserver.server", "netstorm.scheduler", "netstorm.launcher",
                 "netstorm.bench", "netstorm.wan")),
    ("scheduler", ("netstorm.geoserver.server", "netstorm.geoserver.worker", "netstorm.kvstore",
                   "netstorm.launcher", "netstorm.bench", "netstorm.wan")),
])
def test_the_plug_in_and_the_scheduler_stay_on_their_side(folder, forbidden):
    for path in python_files(REPO / folder):
        for target in imports_of(path):
            assert not target.startswith(forbidden), f"{module_name(path)} imports {target}"


@pytest.mark.parametrize("where,line,error", [
    ("worker/client.py", "from ..server import local_store", "may import only"),
    ("server/local_store.py", "from ..worker.client import WorkerClient", "may import only"),
    ("core/van.py", "from ..server.wan import routing", "may import only"),
    ("config/cluster.py", "from ..core import van", "may import only"),
    ("server/wan/routing.py", "from .. import aggregation", "never imports the rest"),
    ("core/wire.py", "import netstorm.kvstore", "never imports the plug-in"),
])
def test_the_checker_finds_each_kind_of_violation(where, line, error):
    path = GEOSERVER / where
    check_module(path)
    with pytest.raises(AssertionError, match=error):
        check_module(path, path.read_text() + "\n" + line + "\n")
