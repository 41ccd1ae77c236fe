"""Quorum rounds live (scheduler/quorum.py, geoserver/server/quorum_rounds.py): three DCs on
loopback, one DC's workers late once; the rest is in tests/unit/test_quorum*.py."""
import re

import numpy as np
import pytest
from launching import launch, worker_cmd

DCS, WORKERS, ROUNDS = 3, 2, 5
LATE_S = 3.0        # dc2's workers sleep this long once, in WAN round 2 (grace_s = 2)


def _decisions(output: str) -> dict:
    """WAN round -> {DC: worker-rounds} of the rounds the scheduler logged (those where a
    DC was left out or merged more than one round; every other round: every DC, one)."""
    out = {}
    for rnd, weights in re.findall(r"quorum round (\d+): ([\w ,]+) worker-rounds", output):
        out[int(rnd)] = {dc: int(w) for dc, w in (p.split() for p in weights.split(", "))}
    return out


def _expected(steps_per_round: int, dc_of: dict, decisions: dict) -> np.ndarray:
    """The workers' final weights by the formula: WAN round r adds the sum of the deltas its
    DCs cover (a DC of n workers with weight w covers its next w / n rounds) over the total
    weight; every DC's rounds are all covered, some maybe after round ROUNDS.
    A worker's delta of a round is minus its gradients' sum (SGD at learning rate 1,
    gradient ``rank + 1 + step``)."""
    w = np.zeros(3, np.float64)
    ranks = {dc: [r for r, d in dc_of.items() if d == dc] for dc in set(dc_of.values())}
    covered = {dc: 0 for dc in ranks}
    final = None
    for rnd in range(1, max([ROUNDS, *decisions]) + 1):
        if rnd == ROUNDS + 1:       # the workers stop at round ROUNDS; a DC still behind
            final = w.copy()        # then has its last rounds merged into the replicas'
        weights = decisions.get(rnd, {dc: WORKERS for dc in ranks})
        total = 0.0
        for dc, weight in weights.items():
            for _ in range(weight // WORKERS):
                covered[dc] += 1
                steps = range((covered[dc] - 1) * steps_per_round,
                              covered[dc] * steps_per_round)
                total -= sum(r + 1 + s for r in ranks[dc] for s in steps)
        w += total / sum(weights.values())
    assert all(c == ROUNDS for c in covered.values()), f"rounds not merged: {covered}"
    return w if final is None else final


@pytest.mark.slow
@pytest.mark.parametrize("sync, steps_per_round", [
    ("diloco:h=2,outer_lr=1,outer_momentum=0,quorum=2,grace_s=2", 2),
    ("hfa:k1=3,quorum=2,grace_s=2", 3),
])
def test_quorum_round_goes_on_without_a_late_dc_and_merges_its_update_once(
        no_leftovers, sync, steps_per_round):
    """dc2's workers sleep before their first step of WAN round 2: it completes with dc0
    and dc1 after the grace, dc2's round 2 is merged later with its weight and dc2 catches
    up; every worker ends with the same bits, equal to the formula over every push."""
    run = launch(["--dcs", DCS, "--workers-per-dc", WORKERS, "--sync", sync],
                 worker_cmd("quorum_worker.py", ROUNDS * steps_per_round, "--slow-dc", "dc2",
                            "--slow-step", steps_per_round, "--slow-s", LATE_S),
                 no_leftovers, timeout=240)
    assert run.code == 0, run.output[-5000:]
    dc_of = {int(r): dc for r, dc in re.findall(r"rank (\d+) dc (\w+)", run.output)}
    assert len(dc_of) == DCS * WORKERS and "dc2" in dc_of.values(), run.output[-3000:]
    decisions = _decisions(run.output)
    assert "dc2" not in decisions.get(2, {"dc2": 0}), run.output[-3000:]
    finals = re.findall(r"rank \d+ final \[([^\]]*)\] (\w+)", run.output)
    assert len(finals) == DCS * WORKERS and len({d for _, d in finals}) == 1, finals
    got = np.array([float(x) for x in finals[0][0].split(",")])
    np.testing.assert_allclose(got, _expected(steps_per_round, dc_of, decisions), rtol=1e-6)
