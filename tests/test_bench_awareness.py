"""scripts/bench_awareness.py: estimate errors against the emulator's rates, reaction rounds."""
from dataclasses import dataclass

import pytest

import bench_awareness as ba


@dataclass
class Change:
    t_s: float
    rates: dict


class Runner:
    """Trace runner stand-in: started at monotonic 1000; a -> b at 100, then 50 from t=20."""

    started = 1000.0
    applied = [Change(0.0, {("a", "b"): 100.0}), Change(20.0, {("a", "b"): 50.0}),
               Change(40.0, {("a", "b"): 80.0})]

    def rates_at(self, t_s):
        current = {}
        for c in self.applied:
            if c.t_s <= t_s:
                current.update(c.rates)
        return current


def rates(t, rnd, est, age, stalled=False):
    return {"t": t, "event": "rates", "round": rnd, "rates": {"a->b": [est, age, stalled],
                                                              "b->a": [10.0, None, False]}}


def test_errors_count_each_fresh_measurement_once_against_the_rate_then():
    records = [rates(1005.0, 1, 95.0, 0.5), rates(1006.0, 1, 95.0, 1.5),   # same measurement
               rates(1010.0, 2, 90.0, 9.0),                                  # stale: skipped
               rates(1025.0, 3, 40.0, 1.0), rates(1026.0, 3, 0.01, 0.0, True)]
    errors = ba.estimate_errors(records, Runner())
    assert [(round(t, 1), est, true) for t, _, est, true, _ in errors] == \
        [(4.5, 95.0, 100.0), (24.0, 40.0, 50.0)]
    assert [e[4] for e in errors] == pytest.approx([0.05, 0.2])


def test_reactions_give_rounds_from_the_change_to_the_next_policy():
    records = [rates(1019.0, 4, 100.0, 0.1), rates(1021.0, 5, 100.0, 0.1),
               {"t": 1024.0, "event": "policy", "reason": "re-planned", "start_round": 7},
               {"t": 1030.0, "event": "policy", "reason": "re-planned", "start_round": 8},
               rates(1041.0, 9, 100.0, 0.1)]
    react = ba.reactions(records, Runner())
    assert react == [{"t_s": 20.0, "round": 4, "new_policy_round": 7, "iterations": 3},
                     {"t_s": 40.0, "round": 5, "new_policy_round": None, "iterations": None}]
    summary = ba.summary("/nonexistent", Runner())
    assert summary["awareness_median_rel_error"] is None and summary["estimates"] == 0
