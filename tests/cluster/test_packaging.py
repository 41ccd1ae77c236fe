"""packaging: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_packaging.py. Also what an organisation adopting the package
checks: LICENSE and NOTICE in the wheel, the extras, and the test set-up's system packages
(installed only under CI or NETSTORM_TEST_SYSTEM_PACKAGES=1; tests/conftest.py)."""

import configparser
import email
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
                                  "netstorm/launcher/boot/sitecustomize.py",
                                  # asserts the boot folder the launcher puts first
                                  "tests/unit/test_deploy_pod.py")
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
    built-in topologies load, and a pseudo-distributed cluster trains from it, launched
    in the checkout (whose source folders must not shadow the installed package)."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), str(REPO)], check=True, cwd=tmp_path,
                   capture_output=True, timeout=600)
    top = sorted(p.name for p in target.iterdir()
                 if p.name not in ("bin", "__pycache__") and not p.name.endswith(".dist-info"))
    assert top == ["netstorm"]
    info = target / "netstorm-0.1.0.dist-info"
    for name in ("LICENSE", "NOTICE"):      # shipped as PEP 639 says, byte for byte
        assert (info / "licenses" / name).read_bytes() == (REPO / name).read_bytes(), name
    metadata = email.message_from_string((info / "METADATA").read_text())
    assert set(metadata.get_all("Provides-Extra")) == set(_extras()), "setup.cfg's extras"
    assert sorted(metadata.get_all("License-File")) == ["LICENSE", "NOTICE"]
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
    # launched from the checkout, as `netstorm-launch` would be (-P: no current folder on the
    # path): its processes must not take the source folder netstorm/ for the installed package
    run = subprocess.run([sys.executable, "-P", "-m", "netstorm.launcher", "--dcs", "2",
                          "--workers-per-dc", "1", "--", sys.executable,
                          str(WORKERS / "fault_worker.py"), "loop", "2"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.stdout.count("finished 2 rounds") == 2
    assert run.stdout.count("data plane: native") == 2, run.stdout[-3000:]


def _extras() -> dict:
    """setup.cfg's extras: name -> the distribution names they require."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return {name: {re.split(r"[<>=!~; \[]", line.strip())[0].lower()
                   for line in requires.strip().splitlines()}
            for name, requires in config["options.extras_require"].items()}


def test_the_extras_bring_what_the_examples_the_bench_and_the_tests_import():
    """examples/ reads scikit-learn's digits; netstorm-bench plots with matplotlib and trains
    on the digits; `all` is every extra a user runs; `test` runs the examples and the bench."""
    extras = _extras()
    assert extras["examples"] == {"scikit-learn"}
    assert extras["bench"] == {"matplotlib", "scikit-learn"}
    assert extras["all"] == extras["examples"] | extras["bench"]
    # test: the suite, in three processes (pytest-xdist), which also reads the Kubernetes
    # manifests back (pyyaml) and checks them against their schemas (jsonschema)
    assert extras["test"] == extras["all"] | {"pytest", "pytest-xdist", "jsonschema", "pyyaml"}
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    assert config["metadata"]["license_files"].split() == ["LICENSE", "NOTICE"]
    install = (REPO / "README.md").read_text().split("## Install", 1)[1]
    assert "pip install '.[examples]'" in install and "pip install 'netstorm[examples]'" in install
    assert all(f"| `{name}` |" in install for name in extras), "README's table of extras"


def test_license_is_apache_2_and_notice_names_every_vendored_file():
    assert "Apache License\n                           Version 2.0, January 2004" in \
        (REPO / "LICENSE").read_text()
    vendored = sorted(str(path.relative_to(REPO)) for path in
                      (REPO / "tests" / "third_party" / "mxnet").rglob("*.py"))
    notice = (REPO / "NOTICE").read_text()
    assert len(vendored) == 9 and [p for p in vendored if p not in notice] == []
    assert all("Licensed to the Apache Software Foundation" in (REPO / p).read_text()
               for p in vendored)
    schemas = sorted(str(path.relative_to(REPO)) for path in
                     (REPO / "tests" / "third_party" / "k8s").rglob("*.json"))
    assert len(schemas) == 6 and [p for p in schemas if p not in notice] == []


def test_the_set_up_installs_the_packages_the_tests_declare(system_package_rules):
    """scripts/test.sh's SYSTEM_PACKAGES (package:probe) is tests/conftest.py's table, and it
    calls apt-get only inside the opt-in's branch."""
    script = (REPO / "scripts" / "test.sh").read_text()
    listed = re.search(r"^SYSTEM_PACKAGES=\(([^)]*)\)", script, re.M).group(1).split()
    assert dict(entry.split(":", 1) for entry in listed) == \
        {name: package.probe for name, package in system_package_rules.packages.items()}
    body = re.search(r"^install_packages\(\) \{.*?^\}$", script, re.M | re.S).span()
    opted = script.index("\nif opted_in; then\n")
    assert all(body[0] < m.start() < body[1]
               for m in re.finditer(r"^\s*apt-get ", script, re.M))
    assert all(m.start() > opted for m in re.finditer(r"^\s*install_packages ", script, re.M))
    assert "export CI=1" in (REPO / ".ci" / "run").read_text()


@pytest.mark.parametrize("environ, opted_in", [
    ({}, False), ({"CI": ""}, False), ({"CI": "0"}, False), ({"CI": "false"}, False),
    ({"CI": "true"}, True), ({"CI": "1"}, True), ({"NETSTORM_TEST_SYSTEM_PACKAGES": "1"}, True),
    ({"NETSTORM_TEST_SYSTEM_PACKAGES": "yes"}, False)])
def test_system_packages_are_opted_in_under_ci_or_by_the_variable(environ, opted_in,
                                                                   system_package_rules):
    assert system_package_rules.opted_in(environ) is opted_in


def test_a_missing_system_package_skips_naming_it_and_the_opt_in_and_fails_under_ci(
        system_package_rules):
    verdict = system_package_rules.verdict
    nothing, everything = (lambda probe: False), (lambda probe: True)
    kind, reason = verdict(["clang"], False, nothing)
    assert kind == "skip" and "clang" in reason and "NETSTORM_TEST_SYSTEM_PACKAGES=1" in reason
    kind, reason = verdict(["clang", "linux-perf"], True, nothing)
    assert kind == "fail" and "clang, linux-perf" in reason
    assert verdict(["clang"], False, everything) is None
    assert verdict(["clang"], True, everything) is None
    kind, reason = verdict(["openssh-server"], False, everything)     # it starts an sshd
    assert kind == "skip" and "OpenSSH server" in reason
    assert "NETSTORM_TEST_SYSTEM_PACKAGES=1" in reason
    assert verdict(["openssh-server", "slurm-wlm"], True, everything) is None
    with pytest.raises(KeyError):
        verdict(["clangg"], False, everything)


def _pytest_without_opt_in(arguments: list) -> subprocess.CompletedProcess:
    """pytest ``arguments`` in a child without the opt-in, whose PATH has only this Python's
    folder (no perf, clang++ or ssh)."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("CI", "NETSTORM_TEST_SYSTEM_PACKAGES")}
    environ.update(PATH=os.path.dirname(sys.executable))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p",
                           "no:cacheprovider", *arguments], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=120)


def test_without_the_opt_in_the_system_package_tests_skip_naming_it():
    """No sshd started, no package needed: the ssh tests, the fuzzers and the perf test each
    skip with a reason naming the package and NETSTORM_TEST_SYSTEM_PACKAGES=1."""
    done = _pytest_without_opt_in(["tests/cluster/test_launcher_ssh.py",
                                   "tests/cluster/test_dataplane_fuzz.py",
                                   "tests/cluster/test_bench_perf_profile.py",
                                   "-k", "not test_ssh_flag_needs"])      # no sshd in it
    out = done.stdout
    assert done.returncode == 0 and re.search(r"^7 skipped, 1 deselected in ", out, re.M), \
        out[-3000:]
    skips = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert len(skips) == 3 and all("NETSTORM_TEST_SYSTEM_PACKAGES=1" in s for s in skips), skips
    assert any("openssh" in s.lower() for s in skips) and any("clang" in s for s in skips) \
        and any("linux-perf" in s for s in skips), skips
