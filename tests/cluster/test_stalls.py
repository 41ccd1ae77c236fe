"""Hangs that name the stuck node (issue 38), live: a worker that stops pushing is named by
the request that times out waiting for it, and by the scheduler's stall warning first; a
worker that hangs outside the kvstore after the others finished fails the run within
--max-idle, named. Nothing is left running either way. 2 DCs x 1 worker: rank 0 is dc0/0,
rank 1 is dc1/0."""
import pytest

from launching import launch, worker_cmd
from netstorm.launcher.processes import FAILURE_END

pytestmark = pytest.mark.slow


def _failure(run) -> str:
    """The launcher's line naming the failure."""
    lines = [l for l in run.lines("launch") if l.endswith(FAILURE_END)]
    assert len(lines) == 1, run.output[-4000:]
    return lines[0]


def test_a_worker_that_stops_pushing_is_named_by_the_timeout_and_a_stall(no_leftovers):
    """Rank 1 never pushes round 1 (a data loader deadlock); rank 0 waits for it inside
    MXNet's engine until --timeout: its error, the launcher's failure line, names dc1/0, and
    the scheduler warned of the stall (half the timeout) before."""
    run = launch(["--dcs", 2, "--timeout", 10], worker_cmd("fault_worker.py", "stall-rank1"),
                 no_leftovers, timeout=90)
    line = _failure(run)
    assert run.code != 0 and line.startswith("[launch] worker dc0/0 exited with code 1: ")
    assert "waited 10s for value of key 0 after round 1" in line, line
    assert line.endswith(f"; round 1 of key 0 lacks the push of dc1/0 (rank 1){FAILURE_END}"), \
        line
    assert any("stall: rank 1 (dc1/0) sent nothing for " in l and
               l.endswith(" s; rank 0 waits on it") for l in run.lines("scheduler")), \
        run.output[-4000:]


def test_a_worker_hanging_after_the_others_finished_fails_within_max_idle(no_leftovers):
    """Rank 1 sleeps forever after its last round, outside the kvstore, while rank 0
    finishes: reported as a stall (from half --max-idle), then the run fails naming it."""
    run = launch(["--dcs", 2, "--max-idle", 4], worker_cmd("fault_worker.py", "hang-rank1", 3),
                 no_leftovers, timeout=90)
    assert "[worker dc0/0] rank 0 finished 3 rounds" in run.output, run.output[-4000:]
    line = _failure(run)
    assert run.code != 0 and "worker rank 1 (dc1/0, node " in line and \
        "sent nothing on the data path for " in line and \
        "while rank 0 finished (max_idle_s = 4): it is presumed hung" in line, line
    assert any("stall: rank 1 (dc1/0) sent nothing for " in l and
               l.endswith(" s; rank 0 finished") for l in run.lines("scheduler")), \
        run.output[-4000:]
