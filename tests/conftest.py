"""The suite's two folders: tests/unit/ (one process, no sockets: `scripts/test.sh -m unit`)
and tests/cluster/ (processes, sockets, namespaces). Shared helpers are plain modules here:
launching.py (a whole cluster through scripts/launch.py), fakes.py, live_cluster.py, ...

System packages. A few tests need Debian packages that pip cannot install, and some of
them start a system daemon. ``scripts/test.sh`` installs those packages only under CI
(``CI`` set; ``.ci/run`` sets it) or when a developer opts in with
``NETSTORM_TEST_SYSTEM_PACKAGES=1``. A test declares what it needs with
``@pytest.mark.system_package("clang")`` (the names of :data:`SYSTEM_PACKAGES`); a test
that uses a fixture named ``ssh_hosts`` (tests/ssh_hosts.py's sshd) is marked by itself.
Without the opt-in a missing package, or a daemon the test would start, skips the test with
a reason naming the package and the opt-in; with it, a missing package fails the test (the
set-up was to install it: CI runs every test). :func:`system_package_verdict` decides.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

HERE = Path(__file__).resolve().parent
pytest_plugins = ["launching"]     # its fixtures (no_leftovers, ...) for every test

OPT_IN = "NETSTORM_TEST_SYSTEM_PACKAGES"


@dataclass(frozen=True)
class SystemPackage:
    """A Debian package some tests need: ``probe`` is a file it installs (a command found
    on PATH, or an absolute path); ``daemon`` says which system daemon its tests start
    (empty if none): such tests run only under the opt-in, installed or not."""
    probe: str
    daemon: str = ""


# the packages scripts/test.sh installs under the opt-in (its SYSTEM_PACKAGES list, checked
# equal by tests/cluster/test_packaging.py)
SYSTEM_PACKAGES = {
    "linux-perf": SystemPackage("perf"),
    "clang": SystemPackage("clang++"),
    "openssh-server": SystemPackage("/usr/sbin/sshd", daemon="an OpenSSH server on "
                                    "127.0.0.1-3 that admits root with a throw-away key"),
    "openssh-client": SystemPackage("ssh"),
    "slurm-wlm": SystemPackage("/usr/sbin/slurmctld",
                               daemon="Slurm's controller and node daemons"),
    "munge": SystemPackage("/usr/sbin/munged", daemon="MUNGE's authentication daemon"),
    "iptables": SystemPackage("/usr/sbin/iptables"),
    "chromium": SystemPackage("/usr/bin/chromium"),
}
# a fixture of this name starts tests/ssh_hosts.py's sshd: its tests need these packages
SSH_FIXTURE, SSH_PACKAGES = "ssh_hosts", ("openssh-server", "openssh-client")


def system_packages_opted_in(environ) -> bool:
    """True under CI (``CI`` set, not ``0``/``false``) or with ``NETSTORM_TEST_SYSTEM_PACKAGES=1``
    (scripts/test.sh applies the same rule)."""
    ci = environ.get("CI", "").strip().lower()
    return environ.get(OPT_IN) == "1" or ci not in ("", "0", "false")


def is_installed(probe: str) -> bool:
    """Whether ``probe`` (an absolute path, or a command on PATH) exists."""
    return Path(probe).exists() if probe.startswith("/") else shutil.which(probe) is not None


def system_package_verdict(names, opted_in: bool, installed=is_installed):
    """None if a test needing the Debian packages ``names`` may run; otherwise ``("skip",
    reason)`` or, under the opt-in, ``("fail", reason)``. KeyError for an unknown name."""
    packages = {name: SYSTEM_PACKAGES[name] for name in names}
    missing = [name for name, package in packages.items() if not installed(package.probe)]
    apt = f"apt-get install {' '.join(missing)}"
    if missing and opted_in:
        return "fail", (f"Debian's {', '.join(missing)} missing although system packages are "
                        f"opted in (CI or {OPT_IN}=1): scripts/test.sh installs them as root; "
                        f"or run `{apt}`")
    if missing:
        return "skip", (f"needs Debian's {', '.join(missing)}, not installed: "
                        f"`{OPT_IN}=1 bash scripts/test.sh` installs it as root (CI does), "
                        f"or `{apt}`")
    daemons = [package.daemon for package in packages.values() if package.daemon]
    if daemons and not opted_in:
        return "skip", (f"starts {' and '.join(daemons)}: runs under CI or with "
                        f"`{OPT_IN}=1 bash scripts/test.sh`")
    return None


# tests/cluster/ files whose tests use something of the whole machine: network namespaces
# (and the check that none is left), iptables, the sshd on 127.0.0.1-3, Slurm's daemons,
# perf. Under pytest-xdist (scripts/test.sh runs the suite in parallel) they run one at a
# time, in one group; every other file is a group of its own (its module fixtures set up
# once, its tests in order).
HOST_WIDE = {"test_bench.py", "test_bench_perf_profile.py", "test_launch_slurm.py",
             "test_launcher_preflight.py", "test_launcher_ssh.py", "test_multihost_firewall.py",
             "test_packaging.py", "test_probe.py", "test_wan_emulator.py",
             "test_wan_link_cost.py", "test_wan_transport.py"}


def parallel_group(nodeid: str) -> str:
    """The group of the test ``nodeid`` (``tests/cluster/test_x.py::test_y``) whose tests
    pytest-xdist runs in one process, one after another: "host" for :data:`HOST_WIDE`, else
    its file. O(1)."""
    path = nodeid.split("::", 1)[0]
    return "host" if path.startswith("tests/cluster/") and Path(path).name in HOST_WIDE \
        else path


try:        # pytest-xdist's own "loadgroup" marks no longer group under pytest 9's node ids
    from xdist.scheduler import LoadScopeScheduling
except ImportError:         # the suite runs in one process
    pass
else:
    class GroupScheduling(LoadScopeScheduling):
        """pytest-xdist's scope scheduling with :func:`parallel_group` as the scope."""

        def _split_scope(self, nodeid: str) -> str:
            return parallel_group(nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(config, log):
        return GroupScheduling(config, log)


def pytest_configure(config):
    config.addinivalue_line("markers", "system_package(*names): Debian packages the test "
                            "needs (tests/conftest.py, SYSTEM_PACKAGES)")
    config.addinivalue_line("markers", "alone: measures rates or timing of this machine, so "
                            "scripts/test.sh runs it after the others, by itself")


def pytest_collection_modifyitems(items):
    for item in items:
        folder = Path(item.path).resolve().relative_to(HERE).parts[0]
        if folder in ("unit", "cluster"):
            item.add_marker(getattr(pytest.mark, folder))
        if SSH_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.system_package(*SSH_PACKAGES))
        for mark in item.iter_markers("system_package"):
            unknown = [name for name in mark.args if name not in SYSTEM_PACKAGES]
            if unknown:
                raise pytest.UsageError(f"{item.nodeid}: system_package {unknown} is not in "
                                        f"tests/conftest.py's SYSTEM_PACKAGES")


def pytest_runtest_setup(item):
    """Before the test's fixtures: skip it, or fail it under the opt-in, when a system
    package it is marked with is missing (or starts a daemon without the opt-in)."""
    names = [name for mark in item.iter_markers("system_package") for name in mark.args]
    if not names:
        return
    verdict = system_package_verdict(dict.fromkeys(names), system_packages_opted_in(os.environ))
    if verdict is not None:
        kind, reason = verdict
        (pytest.fail if kind == "fail" else pytest.skip)(reason)


@pytest.fixture
def system_package_rules():
    """This module's rules and table, for their tests (a conftest is no importable module)."""
    return SimpleNamespace(verdict=system_package_verdict, opted_in=system_packages_opted_in,
                           packages=SYSTEM_PACKAGES)
