"""netstorm.bench.awareness: estimate errors against the emulator's rates, reaction rounds."""
from dataclasses import dataclass

import pytest

from netstorm.bench import awareness as ba


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
    assert [(round(t, 1), est, true) for t, _, est, true, *_ in errors] == \
        [(4.5, 95.0, 100.0), (24.0, 40.0, 50.0)]
    assert [e[4] for e in errors] == pytest.approx([0.05, 0.2])
    assert [e[5] for e in errors] == pytest.approx([4.5, 4.0])     # since a->b last changed


def test_the_summary_gives_the_largest_over_estimate(tmp_path):
    import json
    path = tmp_path / "stats.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        rates(1005.0, 1, 150.0, 0.5), rates(1025.0, 3, 40.0, 1.0)]))
    summary = ba.summary(path, Runner())
    assert summary["awareness_max_overestimate"] == 1.5      # 150 on a link set to 100
    assert summary["awareness_median_rel_error"] == pytest.approx(0.35)
    assert summary["awareness_worst_overestimate"] == {
        "t_s": 4.5, "direction": "a->b", "estimate": 150.0, "true": 100.0,
        "since_change_s": 4.5}
    # 90 measured 1 s after the drop to 50 has not had time to follow it: it counts in the
    # largest over-estimate but not once settled
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        rates(1005.0, 1, 110.0, 0.5), rates(1021.5, 3, 90.0, 0.5)]))
    summary = ba.summary(path, Runner())
    assert summary["awareness_max_overestimate"] == 1.8
    assert summary["awareness_max_overestimate_settled"] == 1.1


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
    assert summary["awareness_max_overestimate"] is None


def test_round_costs_judge_the_policy_in_force_at_the_rates_set_mid_round():
    from netstorm.geoserver.policy.tree import Tree
    from netstorm.scheduler.planning import predict_iteration_s
    from netstorm.scheduler.topology import Link, Topology
    topology = Topology("two", ("a", "b"), (Link("a", "b", 100.0, 100.0),))

    class TwoWay(Runner):
        applied = [Change(0.0, {("a", "b"): 100.0, ("b", "a"): 100.0}),
                   Change(20.0, {("a", "b"): 50.0, ("b", "a"): 25.0})]

    def policy(version, start, root, t):
        parent = {"a": None, "b": "a"} if root == "a" else {"a": "b", "b": None}
        return {"t": t, "event": "policy", "reason": "re-planned", "version": version,
                "start_round": start, "trees": [{"root": root, "share": 1.0, "parent": parent}]}
    records = [policy(1, 0, "a", 999.0), policy(2, 3, "b", 1012.0), policy(3, 9, "a", 1013.0)]
    rows = ba.round_costs(records, TwoWay(), topology, iter_start=[1000.0, 1010.0, 1022.0],
                          iter_s=[10.0, 12.0, 8.0], model_bytes=1e6, chunk_bytes=1 << 20)
    assert [(r["round"], r["version"], r["measured_s"]) for r in rows] == [(2, 1, 12.0),
                                                                           (3, 2, 8.0)]
    slow = topology.with_rates({("a", "b"): 50.0, ("b", "a"): 25.0})
    tree_b = [(Tree("b", {"a": "b", "b": None}), 1.0)]
    assert rows[1]["in_force_s"] == pytest.approx(
        predict_iteration_s(tree_b, slow, 1e6, chunk_bytes=1 << 20), abs=1e-3)
    assert rows[0]["in_force_s"] < rows[1]["in_force_s"]        # round 2 ran at 100 Mbit/s
    assert all(r["best_s"] <= r["in_force_s"] + 1e-3 for r in rows)
    summary = ba.round_costs_summary(rows)
    assert summary["mean_measured_s"] == pytest.approx(10.0)
