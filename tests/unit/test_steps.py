"""esync step counts (geoserver/worker/steps.py): awaited per round, woken by an abort."""
import pytest

from netstorm.geoserver.worker.requests import Requests
from netstorm.geoserver.worker.settings import KVStoreError
from netstorm.geoserver.worker.steps import KEPT_STEP_COUNTS, StepCounts


def test_a_round_s_step_count_is_returned_once_it_came_and_old_ones_are_dropped():
    steps = StepCounts(Requests(0, 30.0, True))
    assert steps.after(0, "server of eu (node 1)") == 1         # before any value
    steps.record(3, 4)
    steps.record(3 + KEPT_STEP_COUNTS, 2)
    assert steps.after(3 + KEPT_STEP_COUNTS, "server of eu (node 1)") == 2
    assert 3 in steps.known and 0 not in steps.known


def test_an_abort_ends_the_wait_for_a_step_count_naming_the_reason():
    requests = Requests(2, 30.0, True)
    steps = StepCounts(requests)
    requests.fail_all("the run was aborted: server of eu failed")
    with pytest.raises(KVStoreError, match="worker rank 2: the run was aborted: server of eu"):
        steps.after(5, "server of eu (node 1)")


def test_a_step_count_that_never_comes_fails_naming_the_round_and_the_server():
    steps = StepCounts(Requests(2, 0.0, True))
    with pytest.raises(KVStoreError, match="worker rank 2: waited 0s for the step count "
                                           r"after round 5 from server of eu \(node 1\)"):
        steps.after(5, "server of eu (node 1)")
