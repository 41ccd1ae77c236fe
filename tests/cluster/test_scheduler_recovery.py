"""A replaceable scheduler (``[recovery] scheduler_restarts``, docs/recovery.md): live
loopback clusters whose scheduler is SIGKILLed mid-training. The rebuild's logic is
tested in process in tests/unit/test_rebuild.py and tests/unit/test_scheduler_watch.py."""

import threading

import numpy as np
import pytest
from launching import free_port, launch, worker_cmd
from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.sync import SyncConfig

from cluster.test_sync import _weights
from unit.test_recovery import _spec, _values, uninterrupted

_spec.loader.exec_module(_values)       # the worker scripts' own gradients

SHAPES = _values.SHAPES
ROUNDS = 30
KILLED = "[launch] scheduler was killed by SIGKILL"


def _cluster_file(tmp, dcs: int, workers: int, sync: str = "fsa"):
    """A loopback cluster whose nodes take a silent scheduler for dead after 1.5 s (the
    machine is loaded: a generous timeout_s for everything else)."""
    config = pseudo_cluster(dcs, workers, free_port(), heartbeat_s=0.25, dead_after_s=1.5,
                            timeout_s=40.0, sync=SyncConfig.parse(sync))
    path = tmp / "cluster.toml"
    path.write_text(to_toml(config))
    return path


def _kill_scheduler_when(cue, tmpdir, killed: list) -> None:
    """SIGKILL the scheduler of the run started with TMPDIR ``tmpdir`` once ``cue`` (a
    file) exists."""
    import os
    import signal
    import time

    import psutil
    deadline = time.monotonic() + 120
    while not cue.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        try:
            ours = proc.environ().get("TMPDIR") == str(tmpdir)      # this test's
        except psutil.Error:
            continue
        if ours and "netstorm.scheduler" in cmd:
            os.kill(proc.info["pid"], signal.SIGKILL)
            killed.append(proc.info["pid"])


def _run_killing_the_scheduler(tmp, flags: list, command: list, cue) -> tuple:
    killed = []
    killer = threading.Thread(target=_kill_scheduler_when, args=(cue, tmp, killed))
    killer.start()
    run = launch(flags, command, tmp, timeout=240)
    killer.join()
    assert killed, run.output[-3000:]
    return run


@pytest.mark.slow
def test_scheduler_recovery_fsa_goes_on_and_ends_exactly(no_leftovers):
    """2 DCs x 2 workers, fsa, momentum SGD on gradients whose sums are exact: the
    scheduler is SIGKILLed as rank 0 finishes round 8 of 30. The launcher starts a new one,
    the nodes train on meanwhile and re-register with their reports, it takes the cluster
    over, and every worker ends with the weights of an uninterrupted run, bit for bit."""
    cue, out = no_leftovers / "cue", no_leftovers / "out"
    out.mkdir()
    run = _run_killing_the_scheduler(
        no_leftovers, ["--cluster", _cluster_file(no_leftovers, 2, 2),
                       "--scheduler-restarts", 1],
        worker_cmd("recover_worker.py", ROUNDS, out, "--mark-at", 8, cue, "--pause", 0.1),
        cue)
    assert run.code == 0, run.output[-6000:]
    assert f"{KILLED}; starting a new one; the nodes re-register with it (1 of 1)" \
        in run.output
    assert "took the running cluster over from" in run.output, run.output[-4000:]
    want = uninterrupted(ROUNDS, 4)
    for rank in range(4):
        got = np.load(out / f"rank{rank}.npz")
        for key in SHAPES:
            np.testing.assert_array_equal(got[str(key)], want[key], err_msg=f"rank {rank}")


@pytest.mark.slow
def test_scheduler_recovery_diloco_ends_with_the_uninterrupted_weights(no_leftovers):
    """2 DCs x 1 worker, diloco (h = 2, Nesterov outer steps): a run whose scheduler is
    SIGKILLed after step 6 of 24 ends with the same bits as the same run uninterrupted."""
    steps, sync = 24, "diloco:h=2"
    want_out, got_out, cue = (no_leftovers / "want", no_leftovers / "got",
                              no_leftovers / "cue")
    want_out.mkdir()
    got_out.mkdir()
    cluster = _cluster_file(no_leftovers, 2, 1, sync)
    plain = launch(["--cluster", cluster], worker_cmd("sync_worker.py", want_out, "--steps",
                                                      steps), no_leftovers)
    assert plain.code == 0, plain.output[-4000:]
    run = _run_killing_the_scheduler(
        no_leftovers, ["--cluster", cluster, "--scheduler-restarts", 1],
        worker_cmd("sync_worker.py", got_out, "--steps", steps, "--mark-at", 6, cue,
                   "--pause", 0.15), cue)
    assert run.code == 0, run.output[-6000:]
    assert "took the running cluster over from" in run.output, run.output[-4000:]
    for rank in range(2):
        want, got = _weights(want_out / f"rank{rank}.params"), \
            _weights(got_out / f"rank{rank}.params")
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"rank {rank} {name}")


@pytest.mark.slow
def test_scheduler_recovery_off_ends_the_run_naming_the_scheduler(no_leftovers):
    """Without scheduler_restarts a SIGKILLed scheduler ends the run at once, the launcher
    naming it (the documented error)."""
    cue, out = no_leftovers / "cue", no_leftovers / "out"
    out.mkdir()
    run = _run_killing_the_scheduler(
        no_leftovers, ["--cluster", _cluster_file(no_leftovers, 2, 1)],
        worker_cmd("recover_worker.py", ROUNDS, out, "--mark-at", 3, cue, "--pause", 0.1),
        cue)
    assert run.code != 0
    assert f"{KILLED}; stopping the cluster" in run.output, run.output[-3000:]
