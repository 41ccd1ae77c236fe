"""netstorm.bench.quality_report: the train-mode table and plot."""
import gc

from netstorm.bench.accuracy import comparisons
from netstorm.bench.quality_report import plot, table, target_text


def _result(metric="accuracy", target=None):
    ok = {"iter_s": [1.0], "median_s": 1.0, "correct": True, "final_quality": 0.96,
          "metric": metric, "comm_fraction": 0.99, "compute_utilization": 0.012,
          "wan_bytes_per_sample": 4e4, "iters": 10, "samples_per_iter": 96,
          "curve": [[10.0, 0.96, 10]], "time_to_target_s": 10.0, "iterations_to_target": 10,
          "samples_to_target": 960}
    fast = {**ok, "time_to_target_s": 2.5, "curve": [[2.5, 0.96, 10]], "iters": 500,
            "wan_bytes_per_sample": 1e3, "wan_bytes_per_outer_round": 2.5e6,
            "wan_round_iters": 20}
    systems = {"mxnet-1ps": ok, "netstorm-diloco-topk2bit": fast,
               "netstorm-mpq": {"correct": False, "error": "exit code 1"}}
    if metric == "loss":
        for r in (ok, fast):
            r.update(final_quality=5.1, final_perplexity=164.0)
    return {"model": "mlp-digits", "data": "digits", "model_bytes": 4.5e6,
            "topology": "small", "workers_per_dc": 1, "iters": 10,
            "target": target or {"metric": metric, "value": 0.95, "from": None},
            "systems": systems, "comparisons": comparisons(systems)}


def test_table_compares_times_to_target_and_bytes_and_names_failures():
    text = table(_result())
    assert "time to 0.95: netstorm-diloco-topk2bit 4.00x sooner than mxnet-1ps" in text
    slower = _result()
    slower["comparisons"]["time_to_target"][0]["speedup"] = 0.25
    assert "netstorm-diloco-topk2bit 4.00x later than mxnet-1ps" in table(slower)
    assert "WAN bytes per sample: netstorm-diloco-topk2bit 40.00x fewer than mxnet-1ps" in text
    assert "WAN bytes per outer round: netstorm-diloco-topk2bit 2.50 MB (one every 20 " \
        "iterations)" in text and text.count("per outer round") == 1
    assert "exit code 1" in text and "99.0%" in text and "1.2%" in text and "960" in text
    assert "ppl" not in text and "time to test accuracy" in text
    lines = text.splitlines()
    assert len(lines[1]) == len(lines[2]) == len(lines[3])     # the columns line up


def test_a_loss_table_shows_perplexity_and_where_its_target_came_from():
    target = {"metric": "loss", "value": 5.1, "from": "mxnet-1ps"}
    text = table(_result("loss", target))
    assert "ppl" in text and "164.0" in text and "validation loss" in text
    assert "target 5.1 (the final loss of mxnet-1ps)" in text
    assert target_text({"target": {"metric": "loss", "value": None, "from": "mxnet-1ps"}}) \
        == "none (mxnet-1ps has no final value)"
    assert target_text({}) == "none"


def test_plot_writes_a_png_for_either_direction(tmp_path):
    for metric in ("accuracy", "loss"):
        path = plot(_result(metric), str(tmp_path / f"{metric}.png"))
        assert (tmp_path / f"{metric}.png").read_bytes()[:4] == b"\x89PNG"
        assert path.endswith(f"{metric}.png")
    # matplotlib's figures leave cycles that take two collections (the first frees what
    # keeps the second's alive): collect them now, not in a later test that counts garbage
    gc.collect()
    gc.collect()
