"""Elastic data centers, live (docs/recovery-elastic.md): a DC leaves a running cluster and
the others go on. The membership logic alone is tested in tests/unit/test_membership.py."""

import threading

import mxnet as mx
import numpy as np
import pytest
from launching import launch, worker_cmd

from cluster.test_recovery import _kill_server_when
from unit.test_recovery import _spec, _values

_spec.loader.exec_module(_values)       # the worker scripts' own gradients

OPTIMIZER, SHAPES, gradient = _values.OPTIMIZER, _values.SHAPES, _values.gradient
ROUNDS = 16


def with_a_departure(key: int, rounds: int, ranks: int, last_full: int):
    """Key ``key``'s weights when ``ranks`` workers contribute up to round ``last_full``
    and every rank but the last from then on (MXNet's own updater; exact sums)."""
    updater = mx.optimizer.get_updater(mx.optimizer.create("sgd", **OPTIMIZER))
    weights = mx.nd.ones(SHAPES[key])
    for rnd in range(1, rounds + 1):
        count = ranks if rnd <= last_full else ranks - 1
        updater(key, mx.nd.array(sum(gradient(key, rnd, r) for r in range(count))), weights)
    return weights.asnumpy()


@pytest.mark.slow
def test_elastic_a_dc_leaves_a_live_3dc_run_and_the_others_never_stop(no_leftovers):
    """``--dcs 2:3``: dc2's server is SIGKILLed as rank 0 finishes round 6 of 16; dc2
    leaves (its worker is stopped), dc0 and dc1 freeze, replay the round in flight without
    it and finish every round: both replicas end bit-identical, equal to MXNet's updater
    on the sums of all three ranks up to some round and of ranks 0 and 1 after it."""
    cue, out = no_leftovers / "cue", no_leftovers / "out"
    out.mkdir()
    killed = []
    killer = threading.Thread(target=_kill_server_when, args=(cue, "dc2", no_leftovers, killed))
    killer.start()
    run = launch(["--dcs", "2:3", "--workers-per-dc", 1, "--policy", "star"],
                 worker_cmd("recover_worker.py", ROUNDS, out, "--mark-at", 6, cue,
                            "--pause", 0.05),
                 no_leftovers, timeout=240)
    killer.join()
    assert killed, run.output[-3000:]
    assert run.code == 0, run.output[-6000:]
    assert "dc2 leaves the run (2 DC(s) remain, min_dcs 2)" in run.output, run.output[-4000:]
    assert "dc2 leaves the run; 2 DC(s) remain" in run.output, run.output[-4000:]
    assert "dc2 left the run; the 2 members went on" in run.output, run.output[-4000:]
    finals = [np.load(out / f"rank{rank}.npz") for rank in (0, 1)]
    for key in SHAPES:
        np.testing.assert_array_equal(finals[0][str(key)], finals[1][str(key)],
                                      err_msg=f"key {key}: the replicas differ")
        matches = [k for k in range(6, ROUNDS + 1) if np.array_equal(
            finals[0][str(key)], with_a_departure(key, ROUNDS, 3, k))]
        assert matches, f"key {key}: no round after which dc2's contributions stop fits"
