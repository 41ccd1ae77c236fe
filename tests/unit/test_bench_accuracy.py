"""netstorm.bench.accuracy: the train-mode figures, table and plot."""
import pytest

from netstorm.bench.accuracy import plot, summarize, table, wan_bytes


def _rank(curve=None, iters=(5.0, 1.0, 1.0, 1.0), compute=(0.5, 0.1, 0.1, 0.1)):
    return {"iter_s": list(iters), "compute_s": list(compute),
            "accuracy_curve": curve or []}


def test_time_to_target_is_the_first_evaluation_at_or_above_it():
    curve = [[1.0, 0.5, 5], [2.0, 0.95, 10], [3.0, 0.94, 15], [4.0, 0.97, 20]]
    s = summarize([_rank(curve), _rank()], target=0.95)
    assert (s["time_to_target_s"], s["iterations_to_target"]) == (2.0, 10)
    assert s["final_accuracy"] == 0.97 and s["accuracy_curve"] == curve
    never = summarize([_rank(curve)], target=0.98)
    assert never["time_to_target_s"] is None and never["iterations_to_target"] is None


def test_comm_fraction_uses_the_busiest_compute_and_the_slowest_iteration():
    fast = _rank(iters=(9, 1.0, 1.0), compute=(9, 0.1, 0.1))
    busy = _rank(iters=(9, 0.5, 2.0), compute=(9, 0.3, 0.1))
    s = summarize([fast, busy], target=None)       # slowest: 1.0, 2.0; busiest: 0.3, 0.1
    assert s["comm_fraction"] == pytest.approx(1 - 0.2 / 1.5, abs=1e-4)
    assert s["compute_s_per_iter"] == pytest.approx(0.2)


def test_wan_bytes_sums_every_direction_and_skips_unreadable_counters():
    before = {("a", "b"): 100, ("b", "a"): 5, ("a", "c"): None}
    after = {("a", "b"): 350, ("b", "a"): 10, ("a", "c"): 999}
    assert wan_bytes(before, after) == 255


def _result(tmp_path=None):
    ok = {"iter_s": [1.0], "median_s": 1.0, "correct": True, "final_accuracy": 0.96,
          "comm_fraction": 0.99, "wan_bytes_per_iter": 4e6,
          "accuracy_curve": [[10.0, 0.96, 10]], "time_to_target_s": 10.0,
          "iterations_to_target": 10}
    fast = {**ok, "time_to_target_s": 2.5, "accuracy_curve": [[2.5, 0.96, 10]]}
    return {"model": "mlp", "data": "digits", "model_bytes": 4.5e6, "topology": "small",
            "workers_per_dc": 1, "iters": 10, "target_accuracy": 0.95,
            "systems": {"mxnet-1ps": ok, "netstorm-bsc": fast,
                        "netstorm-mpq": {"correct": False, "error": "exit code 1"}}}


def test_table_compares_times_to_target_and_names_failures():
    text = table(_result())
    assert "netstorm-bsc 4.00x sooner than mxnet-1ps" in text
    assert "exit code 1" in text and "99.0%" in text and "4.00" in text


def test_plot_writes_a_png(tmp_path):
    path = plot(_result(), str(tmp_path / "acc.png"))
    assert (tmp_path / "acc.png").read_bytes()[:4] == b"\x89PNG" and path.endswith("acc.png")
