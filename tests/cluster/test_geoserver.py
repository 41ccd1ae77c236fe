"""geoserver: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_geoserver.py."""

import pytest
from launching import launch, worker_cmd

EU_SERVER, US_SERVER, EU_WORKER = 1, 2, 3


@pytest.mark.slow
def test_server_survives_garbage_and_unknown_peers(no_leftovers):
    run = launch(["--dcs", 2, "--workers-per-dc", 1],
                 worker_cmd("fault_worker.py", "garbage", 5), no_leftovers)
    assert run.code == 0, run.output[-4000:]
    for reason in ("expected at least 2 frames", "bad magic", "header is", "not JSON",
                   "unknown message kind", "PUSH claims to come from node 4242, which is not in the cluster",
                   "not a multiple of float32"):
        assert sum(reason in l for l in run.lines("server")) == 2, reason
    assert run.output.count("finished 5 rounds") == 2     # sums stayed exact
