"""netstorm.bench (scripts/bench.py): result merging and the table, plus end-to-end runs on an
emulated WAN."""

import io
import json
import pytest
from netstorm.bench.cli import Progress, parse_args
from netstorm.bench.measure import collect
from netstorm.bench.report import table


def _write(tmp_path, rank, times, **extra):
    (tmp_path / f"rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "num_workers": 2, "iter_s": times, "model_bytes": 100, **extra}))


def test_collect_takes_the_slowest_worker_per_iteration_and_drops_warmup(tmp_path):
    _write(tmp_path, 0, [9.0, 1.0, 3.0, 2.0], exact_sums=True)
    _write(tmp_path, 1, [9.0, 2.0, 1.0, 2.5], exact_sums=True)
    r = collect(tmp_path, "comm")
    assert r["iter_s"] == [2.0, 3.0, 2.5] and r["median_s"] == 2.5 and r["correct"]


def test_collect_flags_wrong_sums_missing_workers_and_diverged_weights(tmp_path):
    _write(tmp_path, 0, [1.0, 1.0], exact_sums=True)
    assert not collect(tmp_path, "comm")["correct"]          # rank 1 missing
    _write(tmp_path, 1, [1.0, 1.0], exact_sums=False)
    assert not collect(tmp_path, "comm")["correct"]
    train = {"compute_s": [0.1, 0.1], "curve": [[1.0, 0.9, 2]], "metric": "accuracy",
             "batch_size": 4}
    _write(tmp_path, 0, [1.0, 1.0], weights_sha256="a", **train)
    _write(tmp_path, 1, [1.0, 1.0], weights_sha256="b", **train)
    assert not collect(tmp_path, "train")["correct"]
    _write(tmp_path, 1, [1.0, 1.0], weights_sha256="a", **train)
    r = collect(tmp_path, "train", target=0.9)
    assert r["correct"] and r["time_to_target_s"] == 1.0 and r["comm_fraction"] == 0.9
    assert r["samples_to_target"] == 2 * 4 * 2 and r["final_accuracy"] == 0.9


def test_table_reports_ratios_and_flags_cpu_bound_runs():
    result = {"topology": "t", "model": "m", "model_bytes": 1e6, "mode": "comm",
              "workers_per_dc": 1, "lower_bound_s": 1.0, "systems": {
                  "mxnet-1ps": {"iter_s": [4.0], "median_s": 4.0, "p90_s": 4.0,
                                "correct": True, "cpu_util": 0.2},
                  "netstorm-hips": {"iter_s": [2.0], "median_s": 2.0, "p90_s": 2.0,
                                    "correct": True, "cpu_util": 0.95}}}
    text = table(result)
    assert "speed-up netstorm-hips over mxnet-1ps: 2.00x" in text
    assert text.count("CPU-bound") == 1 and "4.00" in text
    result["mode"] = "train"        # iterations of a local-update system are not comparable
    result["systems"]["netstorm-diloco"] = {"iter_s": [0.1], "median_s": 0.1, "p90_s": 0.1,
                                            "correct": True, "wan_round_iters": 20,
                                            "cpu_util": 0.5}
    text = table(result)
    assert "speed-up netstorm-hips over mxnet-1ps: 2.00x per iteration" in text
    assert "speed-up netstorm-diloco" not in text


def test_progress_echoes_iteration_lines_and_logs_everything(capsys):
    log = io.StringIO()
    progress = Progress(log, "netstorm-bsc")
    progress.write("[worker dc0/0] iter 5/200 0.110s test accuracy 0.4318 at 0.6s")
    progress.write("\n")
    progress.write("[server dc1] WAN chunks sent {}")
    progress.flush()
    assert capsys.readouterr().out == ("bench: netstorm-bsc: iter 5/200 0.110s test accuracy "
                                       "0.4318 at 0.6s\n")
    assert log.getvalue().count("[") == 2


def test_table_gives_the_awareness_ablation_by_median_and_by_mean():
    def system(times):
        return {"iter_s": times, "median_s": sorted(times)[len(times) // 2],
                "mean_s": sum(times) / len(times), "p90_s": max(times), "correct": True,
                "cpu_util": 0.5}
    result = {"topology": "t", "model": "m", "model_bytes": 1e6, "mode": "comm",
              "workers_per_dc": 1, "lower_bound_s": 1.0, "systems": {
                  "netstorm-fapt": system([20.0, 20.0, 20.0]),
                  "netstorm-full": system([10.0, 10.0, 40.0])}}
    text = table(result)
    assert "speed-up netstorm-full over netstorm-fapt: 2.00x by median, 1.00x by mean" in text
    assert "netstorm-aware over" not in text


@pytest.mark.parametrize("argv, message", [
    (["--systems", "netstorm-bsc"], "netstorm-bsc change the values they move"),
    (["--mode", "train", "--model", "resnet18_v1"],
     "trains a --workload (mlp-digits, cnn-digits, lm), not --model 'resnet18_v1'"),
    (["--mode", "train", "--workload", "lm", "--target-accuracy", "0.9"],
     "--target-accuracy: lm is judged by validation loss: --target-loss"),
    (["--mode", "train", "--target-loss", "4"],
     "--target-loss: mlp-digits is judged by test accuracy"),
    (["--mode", "train", "--workload", "lm", "--target-loss", "0"], "--target-loss must be > 0"),
    (["--mode", "train", "--target-accuracy", "0.9", "--target-from", "mxnet-1ps"],
     "give one target, not --target-accuracy and --target-from"),
    (["--mode", "train", "--target-from", "netstorm-fapt"],
     "--target-from names 'netstorm-fapt', which is not in --systems"),
    (["--mode", "train", "--iters-for", "netstorm-fapt=10"],
     "--iters-for names 'netstorm-fapt', which is not in --systems"),
    (["--mode", "train", "--iters-for", "mxnet-1ps=0"], "--iters-for takes SYSTEM=N"),
    (["--mode", "train", "--iters-for", "mxnet-1ps"], "--iters-for takes SYSTEM=N"),
    (["--mode", "train", "--workload", "lm", "--hidden", "30"],
     "--hidden 30 must be a multiple of --heads 4"),
    (["--mode", "train", "--eval-every", "0"], "--eval-every must be >= 1"),
    (["--mode", "train", "--lr", "0"], "--lr must be > 0"),
    (["--mode", "train", "--systems", "netstorm-bsc", "--ratio", "2"],
     "--bsc settings: ratio must be in (0, 1], got 2.0"),
    (["--mode", "train", "--systems", "mxnet-2bit", "--threshold", "-1"],
     "--2bit settings: threshold must be a positive number"),
    (["--mode", "train", "--target-accuracy", "95"], "--target-accuracy must be in (0, 1]"),
    (["--straggler", "dc1"], "--straggler takes DC=SECONDS"),
    (["--straggler", "dc1=inf"], "seconds must be a finite number >= 0"),
    (["--latency", "--systems", "netstorm-fapt,mxnet-sharded"],
     "stock MXNet's ps-lite would run delay-free"),
])
def test_settings_that_cannot_work_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err
