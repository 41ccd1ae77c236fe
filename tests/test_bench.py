"""netstorm.bench (scripts/bench.py): result merging and the table, plus end-to-end runs on an
emulated WAN."""
import json
import subprocess
import sys

import pytest

from conftest import REPO, WORKERS, needs_wan
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
    _write(tmp_path, 0, [1.0, 1.0], weights_sha256="a")
    _write(tmp_path, 1, [1.0, 1.0], weights_sha256="b")
    assert not collect(tmp_path, "train")["correct"]


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

    from conftest import leftovers
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
