"""netstorm.bench (scripts/bench.py): result merging and the table, plus end-to-end runs on an
emulated WAN."""
import io
import json
import subprocess
import sys

import pytest

from launching import REPO, WORKERS, needs_wan
from netstorm.bench.cli import Progress, parse_args
from netstorm.bench.measure import collect
from netstorm.bench.report import table
from netstorm.wan import list_netns


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
    train = {"compute_s": [0.1, 0.1], "accuracy_curve": [[1.0, 0.9, 2]]}
    _write(tmp_path, 0, [1.0, 1.0], weights_sha256="a", **train)
    _write(tmp_path, 1, [1.0, 1.0], weights_sha256="b", **train)
    assert not collect(tmp_path, "train")["correct"]
    _write(tmp_path, 1, [1.0, 1.0], weights_sha256="a", **train)
    r = collect(tmp_path, "train", target=0.9)
    assert r["correct"] and r["time_to_target_s"] == 1.0 and r["comm_fraction"] == 0.9


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


@pytest.mark.slow
@needs_wan
def test_bench_runs_every_system_on_small(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench.py"), "--topology", "small",
         "--model", "squeezenet1.0", "--iters", "2", "--bandwidth-scale", "5",
         "--json", str(out), "--plot", str(tmp_path / "p.png"),
         "--keep-logs", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["systems"]) == {"mxnet-1ps", "mxnet-sharded", "netstorm-hips"}
    for name, r in result["systems"].items():
        assert r["correct"] and len(r["iter_s"]) == 2, name
        assert r["median_s"] > result["lower_bound_s"] > 0, name   # nothing beats physics
        assert 0 <= r["cpu_util"] <= 1
    assert (tmp_path / "p.png").stat().st_size > 0
    assert (tmp_path / "p-topology.png").stat().st_size > 0
    assert not [n for n in list_netns() if n.startswith("netstorm-")]


@pytest.mark.slow
@needs_wan
def test_launch_runs_a_cluster_on_the_emulated_wan():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "launch.py"), "--wan", "small",
         "--workers-per-dc", "1", "--", sys.executable, str(WORKERS / "fault_worker.py"),
         "loop", "3"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert proc.stdout.count("finished 3 rounds") == 3
    assert not [n for n in list_netns() if n.startswith("netstorm-")]


@pytest.mark.slow
@needs_wan
def test_interrupted_bench_tears_down_wan_and_processes(tmp_path):
    import os
    import signal
    import time

    from launching import leftovers
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "bench.py"), "--topology", "small",
         "--model", "squeezenet1.0", "--iters", "500", "--systems", "netstorm-hips",
         "--keep-logs", str(tmp_path / "logs")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    log = tmp_path / "logs" / "netstorm-hips.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "iter 1/500" in log.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out.decode()[-2000:]
    assert b"interrupted" in out
    time.sleep(0.5)
    assert not [n for n in list_netns() if n.startswith("netstorm-")]
    assert leftovers(str(tmp_path)) == []


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
    (["--mode", "train", "--model", "resnet18_v1"], "trains mlp, not 'resnet18_v1'"),
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


@pytest.mark.slow
@needs_wan
def test_bench_train_mode_reports_time_to_accuracy(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench.py"), "--mode", "train", "--iters", "10",
         "--hidden", "64", "--eval-every", "5", "--target-accuracy", "0.3", "--warmup-rounds",
         "0", "--systems", "mxnet-2bit,netstorm-bsc", "--bandwidth-scale", "5",
         "--straggler", "dc1=0.2",
         "--json", str(out), "--plot", str(tmp_path / "acc.png")],
        capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "bench: netstorm-bsc: iter 5/10" in proc.stdout       # progress while it runs
    result = json.loads(out.read_text())
    assert result["compression"]["netstorm-bsc"] == {"type": "bsc", "ratio": 0.1,
                                                     "warmup_rounds": 0}
    assert result["straggler"] == {"dc": "dc1", "extra_compute_s": 0.2}
    for name, r in result["systems"].items():
        assert r["correct"], name
        assert [p[2] for p in r["accuracy_curve"]] == [5, 10], name
        assert r["compute_s_per_iter"] >= 0.2, name       # dc1's worker, stock and netstorm
        assert r["final_accuracy"] > 0.2 and 0 < r["comm_fraction"] < 1, name
    bsc, twobit = result["systems"]["netstorm-bsc"], result["systems"]["mxnet-2bit"]
    assert 0 < bsc["wan_bytes_per_iter"] < twobit["wan_bytes_per_iter"]
    assert (tmp_path / "acc.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "acc-iterations.png").stat().st_size > 0
    assert not [n for n in list_netns() if n.startswith("netstorm-")]
