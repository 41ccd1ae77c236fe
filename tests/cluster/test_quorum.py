"""Quorum rounds live (scheduler/quorum.py, geoserver/server/quorum_rounds.py): three DCs on
loopback, one DC's workers late once; the rest is in tests/unit/test_quorum*.py."""
import re

import numpy as np
import pytest
from launching import launch, worker_cmd

DCS, WORKERS = 3, 2
GRACE_S = 2.0
LATE_S = 3.0        # between one grace and two: late for one round, in time for the next


def _expected(steps_per_round: int, steps: int, dc_of: dict, left_out: dict) -> np.ndarray:
    """The weights by the formula: each WAN round adds the sum of its DCs' deltas (each
    DC's since the last round it was in) over their worker-rounds. A worker's delta of a
    round is minus its gradients' sum (SGD at learning rate 1), gradient ``rank + 1 +
    step``."""
    w = np.zeros(3, np.float64)
    last_in = {dc: 0 for dc in set(dc_of.values())}
    for rnd in range(1, steps // steps_per_round + 1):
        members = [dc for dc in sorted(last_in) if dc not in left_out.get(rnd, ())]
        total, weight = 0.0, 0
        for dc in members:
            ranks = [r for r, d in dc_of.items() if d == dc]
            for carried in range(last_in[dc] + 1, rnd + 1):
                for step in range((carried - 1) * steps_per_round, carried * steps_per_round):
                    total -= sum(r + 1 + step for r in ranks)
            weight += len(ranks) * (rnd - last_in[dc])
            last_in[dc] = rnd
        w += total / weight
    return w


@pytest.mark.slow
@pytest.mark.parametrize("sync, steps_per_round, slow_step", [
    ("diloco:h=2,outer_lr=1,outer_momentum=0,quorum=2,grace_s=2", 2, 2),
    ("hfa:k1=1,k2=2,quorum=2,grace_s=2", 2, 3),
])
def test_quorum_round_goes_on_without_a_late_dc_and_merges_its_update_once(
        no_leftovers, sync, steps_per_round, slow_step):
    """dc2's workers sleep LATE_S before one step of WAN round 2: the round completes
    with dc0 and dc1 after the grace, dc2's deltas of it are merged in a later round with
    their weight, every worker ends with the same bits, and they equal the formula."""
    steps = 5 * steps_per_round
    run = launch(["--dcs", DCS, "--workers-per-dc", WORKERS, "--sync", sync],
                 worker_cmd("quorum_worker.py", steps, "--slow-dc", "dc2", "--slow-step",
                            slow_step, "--slow-s", LATE_S), no_leftovers, timeout=240)
    assert run.code == 0, run.output[-5000:]
    dc_of = {int(r): dc for r, dc in re.findall(r"rank (\d+) dc (\w+)", run.output)}
    assert len(dc_of) == DCS * WORKERS and "dc2" in dc_of.values(), run.output[-3000:]
    left_out: dict = {}
    for rnd, who in re.findall(r"quorum round (\d+) went on without ([\w, ]+)", run.output):
        left_out[int(rnd)] = who.split(", ")
    assert left_out.get(2) == ["dc2"], run.output[-3000:]
    assert max(left_out) < steps // steps_per_round, "the last round must have every DC"
    finals = re.findall(r"rank \d+ final \[([^\]]*)\] (\w+)", run.output)
    assert len(finals) == DCS * WORKERS and len({d for _, d in finals}) == 1, finals
    got = np.array([float(x) for x in finals[0][0].split(",")])
    np.testing.assert_allclose(got, _expected(steps_per_round, steps, dc_of, left_out),
                               rtol=1e-6)
