"""Shared helpers: run a whole cluster through scripts/launch.py with a hard time limit; the
skip for tests that need an emulated WAN. Tests import the installed ``netstorm`` package."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
WORKERS = REPO / "tests" / "workers"

from netstorm.launcher import free_port  # noqa: F401  (re-exported for the tests)
from netstorm.wan import netns


def _wan_unavailable() -> str | None:
    try:
        netns.check_available()
    except netns.WanUnavailable as exc:
        return str(exc)
    return None


WAN_UNAVAILABLE = _wan_unavailable()
needs_wan = pytest.mark.skipif(WAN_UNAVAILABLE is not None,
                               reason=f"needs root and ip netns: {WAN_UNAVAILABLE}")


@dataclass
class Run:
    code: int
    output: str

    def lines(self, prefix: str) -> list:
        return [l for l in self.output.splitlines() if l.startswith(f"[{prefix}")]


def worker_cmd(script: str, *args) -> list:
    return [sys.executable, str(WORKERS / script), *map(str, args)]


def leftovers(marker: str) -> list:
    """Live processes started with TMPDIR=``marker`` (each test's clusters get their own)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get("TMPDIR") == marker \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def launch(launch_args, command, tmp_path, timeout=150, env=None, cwd=REPO) -> Run:
    """Run scripts/launch.py to completion (killing it all after ``timeout``)."""
    full_env = dict(os.environ, TMPDIR=str(tmp_path), **(env or {}))
    argv = [sys.executable, str(REPO / "scripts" / "launch.py"), *map(str, launch_args),
            "--", *command]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=full_env, start_new_session=True, cwd=cwd)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        for p in leftovers(str(tmp_path)):
            p.kill()
        out, _ = proc.communicate()
        pytest.fail(f"cluster did not finish within {timeout}s:\n{out.decode()[-4000:]}")
    return Run(proc.returncode, out.decode("utf-8", "replace"))


@pytest.fixture
def no_leftovers(tmp_path):
    """Fails the test if any process of its cluster survives it."""
    yield tmp_path
    alive = leftovers(str(tmp_path))
    for p in alive:
        p.kill()
    assert not alive, f"processes left running: {[p.info['cmdline'] for p in alive]}"


def train_example_compressed(tmp_path, params: dict, min_accuracy: float = 0.9) -> Run:
    """examples/train_gluon.py on 3 DCs (fapt trees) with ``params`` as the cluster's
    compression, the workers' pushes compressed too (``scope = "all"``): the example must
    learn (accuracy >= ``min_accuracy``; chance is 0.1), every replica agree, and every
    server take compressed pushes and encode WAN chunks."""
    run = launch(["--dcs", 3, "--policy", "fapt", "--compression", json.dumps(params)],
                 [sys.executable, str(REPO / "examples" / "train_gluon.py")], tmp_path)
    assert run.code == 0, run.output[-4000:]
    summaries = [l for l in run.output.splitlines() if "summary rank=" in l]
    accuracies = {l.split("accuracy=")[1].split()[0] for l in summaries}
    assert len(summaries) == 3 and len(accuracies) == 1, summaries
    assert float(accuracies.pop()) >= min_accuracy, summaries
    pushes = [int(n) for n in re.findall(r"compressed pushes (\d+)", run.output)]
    encoded = [int(n) for n in re.findall(r"'encoded': (\d+)", run.output)]
    assert len(pushes) == len(encoded) == 3 and all(pushes) and all(encoded), run.output[-3000:]
    return run
