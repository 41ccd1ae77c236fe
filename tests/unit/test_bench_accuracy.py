"""netstorm.bench.accuracy: the train-mode figures (quality, targets, samples, compute
utilization, comparisons)."""
import math

import pytest

from netstorm.bench.accuracy import (apply_target, comparisons, compute_utilization, overlap,
                                     summarize, wan_bytes, without_pauses)


def _rank(curve=None, iters=(5.0, 1.0, 1.0, 1.0), compute=(0.5, 0.1, 0.1, 0.1), metric=None,
          **extra):
    return {"iter_s": list(iters), "compute_s": list(compute), "curve": curve or [],
            "batch_size": 32, **({"metric": metric} if metric else {}), **extra}


def test_time_and_samples_to_target_are_the_first_evaluation_at_or_above_it():
    curve = [[1.0, 0.5, 5], [2.0, 0.95, 10], [3.0, 0.94, 15], [4.0, 0.97, 20]]
    s = apply_target(summarize([_rank(curve, metric="accuracy"), _rank()]), 0.95)
    assert (s["time_to_target_s"], s["iterations_to_target"]) == (2.0, 10)
    assert s["samples_to_target"] == 10 * 32 * 2             # iterations x batch x workers
    assert s["final_accuracy"] == s["final_quality"] == 0.97
    assert s["accuracy_curve"] == s["curve"] == curve and s["higher_is_better"]
    never = apply_target(summarize([_rank(curve)]), 0.98)
    assert never["time_to_target_s"] is None
    assert never["iterations_to_target"] is None and never["samples_to_target"] is None
    assert apply_target(summarize([_rank(curve)]), None)["time_to_target_s"] is None


def test_a_loss_is_reached_from_above_and_reports_its_perplexity():
    curve = [[1.0, 7.0, 50], [2.0, 5.2, 100], [3.0, 4.9, 150], [4.0, 5.0, 200]]
    s = summarize([_rank(curve, metric="loss")])
    assert s["metric"] == "loss" and not s["higher_is_better"] and "final_accuracy" not in s
    assert s["final_loss"] == 5.0 and s["final_perplexity"] == pytest.approx(math.exp(5.0),
                                                                             abs=0.01)
    apply_target(s, 5.0)          # lower is better: the first value <= 5.0
    assert (s["time_to_target_s"], s["iterations_to_target"]) == (3.0, 150)
    assert s["samples_to_target"] == 150 * 32
    apply_target(s, 4.0)
    assert s["time_to_target_s"] is None


def test_comm_fraction_uses_the_busiest_compute_and_the_slowest_iteration():
    fast = _rank(iters=(9, 1.0, 1.0), compute=(9, 0.1, 0.1))
    busy = _rank(iters=(9, 0.5, 2.0), compute=(9, 0.3, 0.1))
    s = summarize([fast, busy])       # slowest: 1.0, 2.0; busiest: 0.3, 0.1
    assert s["comm_fraction"] == pytest.approx(1 - 0.2 / 1.5, abs=1e-4)
    assert s["compute_s_per_iter"] == pytest.approx(0.2)


def test_a_rank_waiting_out_rank_0s_evaluation_is_not_communicating():
    # rank 1's third iteration (from 12 s, 3 s long) waited 2 s for rank 0's evaluation
    r0 = _rank(iters=(9, 1.0, 1.0), compute=(9, 0.5, 0.5), iter_start_monotonic=[0, 10, 11],
               eval_monotonic=[[12.0, 14.0]])
    r1 = _rank(iters=(9, 1.0, 3.0), compute=(9, 0.5, 0.5), iter_start_monotonic=[0, 10, 12])
    assert without_pauses(r1, r0["eval_monotonic"]) == [9, 1.0, 1.0]
    assert summarize([r0, r1])["comm_fraction"] == pytest.approx(0.5)
    assert without_pauses(_rank(), [[0, 100]]) == [5.0, 1.0, 1.0, 1.0]    # no start times


def test_overlap_counts_only_the_part_inside_the_window():
    assert overlap([[0, 2], [5, 6], [9, 20]], 1.0, 10.0) == pytest.approx(1 + 1 + 1)
    assert overlap([], 0, 5) == 0 and overlap([[6, 7]], 0, 5) == 0


def test_compute_utilization_takes_rank_0s_evaluation_pauses_out_of_every_rank():
    # rank 0 evaluates twice (2 s inside both windows, 1 s after rank 1's ended); both
    # compute 3 s in their measured iterations (the warm-up's 9 s are not counted)
    pauses = [[102.0, 104.0], [110.0, 111.0]]
    r0 = _rank(compute=(9, 1.0, 1.0, 1.0), window_monotonic=[100.0, 110.0],
               eval_monotonic=pauses)
    r1 = _rank(compute=(9, 1.5, 1.5, 0.0), window_monotonic=[100.5, 108.5])
    util = compute_utilization([r0, r1])
    assert util == pytest.approx((3 / (10 - 2) + 3 / (8 - 2)) / 2, abs=1e-4)
    assert summarize([r0, r1])["compute_utilization"] == util
    assert compute_utilization([_rank()]) is None             # no window recorded
    assert compute_utilization([_rank(compute=(1.0,), iters=(1.0,),
                                      window_monotonic=None)]) is None


def test_comparisons_give_speedups_against_mxnet_and_dense_netstorm_and_wan_ratios():
    systems = {"mxnet-1ps": {"time_to_target_s": 100.0, "wan_bytes_per_sample": 1e6},
               "mxnet-2bit": {"time_to_target_s": None, "wan_bytes_per_sample": 5e5},
               "netstorm-fapt": {"time_to_target_s": 40.0, "wan_bytes_per_sample": 1e6},
               "netstorm-diloco": {"time_to_target_s": 10.0, "wan_bytes_per_sample": 2e4}}
    c = comparisons(systems)
    assert {(x["system"], x["against"]): x["speedup"] for x in c["time_to_target"]} == {
        ("netstorm-fapt", "mxnet-1ps"): 2.5, ("netstorm-diloco", "mxnet-1ps"): 10.0,
        ("netstorm-diloco", "netstorm-fapt"): 4.0}
    assert {x["system"]: x["ratio"] for x in c["wan_bytes_per_sample"]} == {
        "mxnet-2bit": 2.0, "netstorm-fapt": 1.0, "netstorm-diloco": 50.0}
    assert comparisons({"netstorm-fapt": {"time_to_target_s": 1.0}}) == {
        "time_to_target": [], "wan_bytes_per_sample": []}


def test_wan_bytes_sums_every_direction_and_skips_unreadable_counters():
    before = {("a", "b"): 100, ("b", "a"): 5, ("a", "c"): None}
    after = {("a", "b"): 350, ("b", "a"): 10, ("a", "c"): 999}
    assert wan_bytes(before, after) == 255
