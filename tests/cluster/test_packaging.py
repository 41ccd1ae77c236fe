"""Packaging (setup.cfg): one ``netstorm`` namespace over the repository's folders, package
data, no import-path tricks; and a non-editable install that works from another directory."""
import configparser
import os
import re
import subprocess
import sys

import pytest

from launching import REPO, WORKERS

FOLDERS = {"netstorm": "netstorm", "netstorm.geoserver": "geoserver",
           "netstorm.kvstore": "kvstore", "netstorm.scheduler": "scheduler"}


def _options():
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    packages = config["options"]["packages"].split()
    package_dir = dict(line.split(" = ") for line in
                       config["options"]["package_dir"].strip().splitlines())
    return packages, package_dir


def test_every_package_folder_is_installed_under_netstorm():
    packages, package_dir = _options()
    assert package_dir == FOLDERS
    found = []
    for name, folder in FOLDERS.items():
        for init in sorted((REPO / folder).rglob("__init__.py")):
            relative = init.parent.relative_to(REPO / folder).parts
            found.append(".".join((name, *relative)))
    assert sorted(packages) == sorted(found), "setup.cfg [options] packages must list these"
    assert all(p == "netstorm" or p.startswith("netstorm.") for p in packages)


def test_no_import_path_tricks_anywhere():
    """netstorm is found because it is installed, never through sys.path or PYTHONPATH. The
    one use of PYTHONPATH: the launcher puts its boot folder (a sitecustomize.py, no
    package) first for the workers it starts. MXNet's vendored examples are theirs."""
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                              "*.py"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    offenders = [path for path in tracked
                 if re.search(r"sys\.path\.(insert|append)|PYTHONPATH",
                              (REPO / path).read_text())
                 and path not in ("tests/cluster/test_packaging.py", "tests/cluster/test_launcher_boot.py",
                                  "netstorm/launcher/supervisor.py",
                                  "netstorm/launcher/boot/sitecustomize.py")
                 and not path.startswith("tests/third_party/")]
    assert offenders == []
    lines = [line for line in (REPO / "netstorm/launcher/supervisor.py").read_text()
             .splitlines() if '"PYTHONPATH"' in line]      # code, not prose
    assert lines and all("BOOT_DIR" in line or "os.environ.get" in line for line in lines), \
        lines


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


@pytest.mark.parametrize("order", ["netstorm first", "mxnet first"])
def test_import_netstorm_registers_the_kvstore_in_either_order(order):
    imports = "import netstorm\nimport mxnet as mx\n"
    if order == "mxnet first":
        imports = "import mxnet as mx\nimport netstorm\n"
    out = _python(imports + "print('netstorm' in mx.kv.KVStoreBase.kv_registry, "
                            "mx.kv.KVStoreBase.kv_registry.get('netstorm') is netstorm.NetStorm)")
    assert out == "True True"


def test_server_and_scheduler_modules_do_not_import_mxnet():
    """Servers and the scheduler import MXNet only when an optimizer runs on them: it costs
    seconds and hundreds of MB per process."""
    out = _python("import sys, netstorm.geoserver.server.geoserver, netstorm.geoserver.__main__, "
                  "netstorm.scheduler.__main__\nprint('mxnet' in sys.modules)")
    assert out == "False"


@pytest.mark.parametrize("module", ["netstorm.geoserver.server.geoserver", "netstorm.geoserver.__main__",
                                    "netstorm.scheduler.__main__", "netstorm.launcher.cli",
                                    "netstorm.geoserver.worker.client"])
def test_importing_a_submodule_installs_no_import_hook(module):
    """Only ``import netstorm`` (a worker's) waits for MXNet's import through a finder on
    ``sys.meta_path``; a server, the scheduler or a tool importing its own modules does not."""
    out = _python(f"import sys\nbefore = list(sys.meta_path)\nimport {module}\n"
                  "print([type(f).__name__ for f in sys.meta_path if f not in before])\n"
                  "import netstorm\nprint('netstorm' in sys.modules)")
    assert out.splitlines() == ["[]", "True"]
    out = _python("import sys\nbefore = list(sys.meta_path)\nimport netstorm\n"
                  "print([type(f).__name__ for f in sys.meta_path if f not in before])")
    assert out == "['_AfterMxnetImport']"


@pytest.mark.slow
def test_non_editable_install_works_from_another_directory(tmp_path):
    """``pip install .`` (into a target folder, dependencies from this environment): only
    ``netstorm`` lands at the top level, ``import netstorm`` registers the kvstore, the
    built-in topologies load, and a pseudo-distributed cluster trains from it."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), str(REPO)], check=True, cwd=tmp_path,
                   capture_output=True, timeout=600)
    top = sorted(p.name for p in target.iterdir()
                 if p.name not in ("bin", "__pycache__") and not p.name.endswith(".dist-info"))
    assert top == ["netstorm"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PYTHONPATH=str(target))
    check = ("import mxnet as mx, netstorm\n"
             "assert netstorm.__file__.startswith(%r), netstorm.__file__\n"
             "assert 'netstorm' in mx.kv.KVStoreBase.kv_registry\n"
             "from netstorm.wan import load_topology\n"
             "assert len(load_topology('paper9').dcs) == 9\n"
             "from netstorm.launcher.supervisor import BOOT_DIR\n"
             "assert (BOOT_DIR / 'sitecustomize.py').is_file(), BOOT_DIR\n"
             "print('ok')\n") % str(target)
    done = subprocess.run([sys.executable, "-c", check], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().endswith("ok"), done.stderr[-3000:]
    run = subprocess.run([sys.executable, "-m", "netstorm.launcher", "--dcs", "2",
                          "--workers-per-dc", "1", "--", sys.executable,
                          str(WORKERS / "fault_worker.py"), "loop", "2"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.stdout.count("finished 2 rounds") == 2


def _parsers(main, monkeypatch) -> list:
    """Every parser ``main(['--help'])`` builds, sub-command parsers included."""
    import argparse
    seen = []
    original = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        seen.append(self)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(SystemExit):
        main(["--help"])
    parsers, todo = [], list(seen)
    while todo:
        parser = todo.pop()
        parsers.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(action.choices.values())
    return parsers


@pytest.mark.parametrize("module", ["netstorm.launcher.cli", "netstorm.bench.cli",
                                    "netstorm.wan.cli", "netstorm.launcher.keygen"])
def test_every_command_line_flag_has_help_text(module, monkeypatch, capsys):
    import importlib
    parsers = _parsers(importlib.import_module(module).main, monkeypatch)
    missing = [f"{parser.prog}: {'/'.join(action.option_strings) or action.dest}"
               for parser in parsers for action in parser._actions
               if not action.help and not action.option_strings == ["-h", "--help"]
               ]
    assert parsers and not missing, missing
