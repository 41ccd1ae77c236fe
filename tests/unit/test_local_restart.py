"""geoserver/config/local_restart.py: which sync modes restart workers, and their steps per
round (docs/recovery-localrestart.md)."""
import pytest

from netstorm.geoserver.config.local_restart import steps_per_round, worker_restart_problem
from netstorm.geoserver.config.sync import SyncConfig


@pytest.mark.parametrize("params, per_round", [({"mode": "fsa"}, 1),
                                               ({"mode": "diloco", "h": 8}, 8),
                                               ({"mode": "hfa", "k1": 3}, 3),
                                               ({"mode": "esync"}, None)])
def test_steps_per_round_of_each_mode(params, per_round):
    assert steps_per_round(SyncConfig(**params)) == per_round


@pytest.mark.parametrize("params, problem", [
    ({"mode": "fsa"}, ""),
    ({"mode": "diloco", "h": 8}, ""),
    ({"mode": "hfa", "k1": 4}, ""),
    ({"mode": "diloco", "h": 8, "delay": 2}, "fragments = 1 and delay = 0 under 'diloco'"),
    ({"mode": "hfa", "k2": 3}, "k2 = 1 under 'hfa' (got 3)"),
    ({"mode": "esync"}, "under 'esync' the workers' own models"),
    ({"mode": "mixed"}, "under 'mixed' the workers' own models")])
def test_worker_restarts_are_refused_where_no_round_is_a_workers_model(params, problem):
    got = worker_restart_problem(SyncConfig(**params))
    assert (problem in got and bool(got)) if problem else got == ""
