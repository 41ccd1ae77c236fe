"""A running server survives garbage frames and strangers, and keeps exact sums."""
import pytest

from conftest import launch, worker_cmd

pytestmark = pytest.mark.slow


def test_server_survives_garbage_and_unknown_peers(no_leftovers):
    run = launch(["--dcs", 2, "--workers-per-dc", 1],
                 worker_cmd("fault_worker.py", "garbage", 5), no_leftovers)
    assert run.code == 0, run.output[-4000:]
    for reason in ("expected at least 2 frames", "bad magic", "header is", "not JSON",
                   "unknown message kind", "dropped PUSH from unknown node 4242",
                   "not a multiple of float32"):
        assert sum(reason in l for l in run.lines("server")) == 2, reason
    assert run.output.count("finished 5 rounds") == 2     # sums stayed exact
