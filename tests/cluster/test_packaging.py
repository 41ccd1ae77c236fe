"""packaging: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_packaging.py."""

import os
import re
import subprocess
import sys

import pytest
from launching import REPO, WORKERS


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
             "from netstorm.geoserver import _dataplane\n"       # the compiled data plane
             "assert _dataplane.__file__.startswith(%r), _dataplane.__file__\n"
             "assert (BOOT_DIR / 'sitecustomize.py').is_file(), BOOT_DIR\n"
             "print('ok')\n") % (str(target), str(target))
    done = subprocess.run([sys.executable, "-c", check], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().endswith("ok"), done.stderr[-3000:]
    run = subprocess.run([sys.executable, "-m", "netstorm.launcher", "--dcs", "2",
                          "--workers-per-dc", "1", "--", sys.executable,
                          str(WORKERS / "fault_worker.py"), "loop", "2"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.stdout.count("finished 2 rounds") == 2
    assert run.stdout.count("data plane: native") == 2, run.stdout[-3000:]
