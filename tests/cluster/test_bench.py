"""bench: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_bench.py."""

import json
import subprocess
import sys
import pytest
from launching import REPO, WORKERS, needs_wan
from netstorm.wan import list_netns


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
    assert result["target"] == {"metric": "accuracy", "value": 0.3, "from": None}
    for name, r in result["systems"].items():
        assert r["correct"], name
        assert [p[2] for p in r["accuracy_curve"]] == [5, 10], name
        assert r["compute_s_per_iter"] >= 0.2, name       # dc1's worker, stock and netstorm
        assert r["final_accuracy"] > 0.2 and 0 < r["comm_fraction"] < 1, name
        assert 0 < r["compute_utilization"] < 1 and r["metric"] == "accuracy", name
        assert r["wan_bytes_per_sample"] == pytest.approx(
            r["wan_bytes_per_iter"] / (32 * 3), rel=0.02), name
        if r["iterations_to_target"]:
            assert r["samples_to_target"] == r["iterations_to_target"] * 32 * 3, name
    bsc, twobit = result["systems"]["netstorm-bsc"], result["systems"]["mxnet-2bit"]
    assert 0 < bsc["wan_bytes_per_iter"] < twobit["wan_bytes_per_iter"]
    assert (tmp_path / "acc.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "acc-iterations.png").stat().st_size > 0
    assert not [n for n in list_netns() if n.startswith("netstorm-")]


@pytest.mark.slow
@needs_wan
def test_bench_train_mode_runs_the_language_model_to_another_systems_final_loss(tmp_path):
    """A tiny transformer on a tiny corpus; the target is where mxnet-1ps ends, and the
    local-update systems (DiLoCo, compressed; streaming in 2 fragments) run twice the
    iterations, evaluated after every outer round."""
    from unit.test_text_corpus import write_corpus
    write_corpus(tmp_path / "html")
    out = tmp_path / "r.json"
    local = ["netstorm-diloco", "netstorm-diloco-topk2bit", "netstorm-streaming"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench.py"), "--mode", "train", "--workload",
         "lm", "--data", str(tmp_path / "html"), "--hidden", "32", "--heads", "2", "--layers",
         "1", "--seq-len", "8", "--vocab", "64", "--batch-size", "4", "--eval-tokens", "64",
         "--lr", "0.01", "--iters", "8", "--eval-every", "4", "--h", "4", "--fragments", "2",
         "--delay", "1", "--systems", ",".join(["mxnet-1ps", "netstorm-fapt", *local]),
         "--iters-for", ",".join(f"{name}=16" for name in local),
         "--target-from", "mxnet-1ps", "--bandwidth-scale", "5", "--json", str(out),
         "--plot", str(tmp_path / "lm.png")],
        capture_output=True, text=True, timeout=600, cwd=REPO,
        env={**__import__("os").environ, "NETSTORM_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    stock = result["systems"]["mxnet-1ps"]
    assert result["target"] == {"metric": "loss", "value": stock["final_loss"],
                                "from": "mxnet-1ps"}
    assert stock["time_to_target_s"] is not None       # it reaches its own final loss
    assert [r["iters"] for r in result["systems"].values()] == [8, 8, 16, 16, 16]
    assert result["sync"]["netstorm-streaming"].startswith("diloco:h=4,")
    assert result["compression"]["netstorm-streaming"] == {"type": "int8"}
    for name, r in result["systems"].items():
        assert r["correct"] and r["metric"] == "loss" and not r["higher_is_better"], name
        assert r["final_perplexity"] > 1 and r["wan_bytes_per_sample"] > 0, name
        assert [p[2] for p in r["curve"]] == list(range(4, r["iters"] + 1, 4)), name
        if r["iterations_to_target"]:
            assert r["samples_to_target"] == r["iterations_to_target"] * 4 * 3, name
    fewer = {c["system"]: c["ratio"] for c in result["comparisons"]["wan_bytes_per_sample"]}
    assert set(fewer) == {"netstorm-fapt", *local}
    assert fewer["netstorm-diloco-topk2bit"] > fewer["netstorm-diloco"] > 2   # h = 4
    assert "the final loss of mxnet-1ps" in proc.stdout and "ppl" in proc.stdout
    assert (tmp_path / "lm.png").read_bytes()[:4] == b"\x89PNG"
    assert not [n for n in list_netns() if n.startswith("netstorm-")]


@pytest.fixture(scope="module")
def small_netstorm_run(tmp_path_factory):
    """One bench run on small of netstorm-fapt-python and netstorm-fapt-observed (squeezenet,
    2 iterations): (the bench's process, its JSON result, its kept logs); only the tests
    marked needs_wan ask for it."""
    tmp = tmp_path_factory.mktemp("bench-small")
    out = tmp / "r.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench.py"), "--topology", "small",
         "--model", "squeezenet1.0", "--iters", "2", "--bandwidth-scale", "5",
         "--systems", "netstorm-fapt-python,netstorm-fapt-observed", "--json", str(out),
         "--keep-logs", str(tmp / "logs")],
        capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text()), tmp / "logs"


@pytest.mark.slow
@needs_wan
def test_bench_reports_per_link_bytes_and_the_data_plane(small_netstorm_run):
    """Each netstorm system's result has the per-link table (bytes carried near the time
    model's, sampled over the measured iterations) and which data plane its servers ran."""
    proc, result, logs = small_netstorm_run
    for name, r in result["systems"].items():
        links = r["links"]
        assert links and all(0.9 < x["carried_vs_assigned"] < 1.3 for x in links
                             if x["carried_vs_assigned"] and x["assigned_bytes_per_iter"]
                             > 10 ** 6), (name, links)
        assert 0 < links[0]["busy_s_per_iter"] <= max(r["iter_s"]) + 0.1
        assert 0 < links[0]["efficiency"] <= 1.05
        assert (logs / f"{name}.link-samples.jsonl").stat().st_size > 0
    plane = result["systems"]["netstorm-fapt-python"]["dataplane"]
    assert plane["ran"] == "python" and plane["configured"] == "python"
    assert plane["source"] == "server logs" and plane["servers"] == {"python": 3}
    assert "busiest links over the measured iterations" in proc.stdout


@pytest.mark.slow
@needs_wan
def test_the_observed_system_is_scraped_in_every_namespace_while_it_runs(small_netstorm_run):
    """netstorm-fapt-observed: its metrics and status page are on and read by one scraper
    per DC namespace (netstorm.bench.scraper); the result counts the scrapes per endpoint,
    the scrapers' CPU is a role of its own, and nothing is left running."""
    _, result, logs = small_netstorm_run
    r = result["systems"]["netstorm-fapt-observed"]
    assert r["correct"] and r["scrapes_ok"] > 0, r.get("scrapes")
    assert sum(r["scrapes"]["status"].values()) > 0, r["scrapes"]   # asked, at least
    assert r["cpu"]["scraper"]["processes"] == 3
    logs = logs / "netstorm-fapt-observed"
    assert sorted(p.name for p in logs.glob("scrapes-*.json")) == [
        "scrapes-dc0.json", "scrapes-dc1.json", "scrapes-dc2.json"]
    assert not list((logs / "targets").glob("netstorm-*.json"))    # removed on exit
    assert not [n for n in list_netns() if n.startswith("netstorm-")]
