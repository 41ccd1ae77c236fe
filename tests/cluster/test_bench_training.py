"""bench training: the worker's train mode on netstorm's kvstore, a few iterations of the cnn
and the language model on a local two-DC cluster (scripts/launch.py, no emulated WAN); the
rest, and the helpers both use, are in tests/unit/test_bench_training.py."""

import json
import sys

import numpy as np
import pytest
from launching import launch
from netstorm.text_corpus import load_corpus
from unit.test_bench_training import LM
from unit.test_text_corpus import write_corpus


def _run(tmp, name, workload_args, sync="fsa"):
    out = tmp / name
    command = [sys.executable, "-m", "netstorm.bench.worker", "--kvstore", "netstorm",
               "--mode", "train", "--out", str(out), *workload_args]
    run = launch(["--dcs", 2, "--workers-per-dc", 1, "--sync", sync], command, tmp,
                 timeout=240, env={"NETSTORM_CACHE": str(tmp / "cache")})
    assert run.code == 0, run.output[-5000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["num_workers"] == 2
    return run, ranks


@pytest.mark.slow
def test_the_cnn_trains_on_netstorm_with_identical_replicas(no_leftovers):
    run, ranks = _run(no_leftovers, "cnn", ["--workload", "cnn-digits", "--hidden", "32",
                                            "--iters", "6", "--eval-every", "3"])
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    assert ranks[0]["metric"] == "accuracy" and [p[2] for p in ranks[0]["curve"]] == [3, 6]
    assert "test accuracy" in run.output
    for r in ranks:
        assert len(r["iter_s"]) == len(r["compute_s"]) == 6
        assert r["window_monotonic"][0] < r["window_monotonic"][1]
    assert len(ranks[0]["eval_monotonic"]) == 2 and ranks[1]["eval_monotonic"] == []


@pytest.mark.slow
@pytest.mark.parametrize("sync", ["fsa", "hfa:k1=2,k2=1", "diloco:h=4"])
def test_the_language_model_trains_on_netstorm_with_adam(no_leftovers, sync):
    """Adam on the servers (fsa) or on the workers (hfa, diloco: local steps, whose
    optimizer step counts as compute)."""
    write_corpus(no_leftovers / "html")
    corpus = load_corpus(str(no_leftovers / "html"), 64, cache=no_leftovers / "cache")
    run, ranks = _run(no_leftovers, "lm", [*LM, "--data", str(no_leftovers / "html"),
                                           "--iters", "8", "--eval-every", "4"], sync)
    curve = ranks[0]["curve"]
    assert ranks[0]["metric"] == "loss" and [p[2] for p in curve] == [4, 8]
    assert curve[-1][1] < np.log(len(corpus.vocab))          # below a uniform guess
    assert "validation loss" in run.output and "perplexity" in run.output
    assert all(r["vocab"] == len(corpus.vocab) and r["batch_size"] == 4 for r in ranks)
    # fsa: every step; hfa, diloco: the last step (the 8th) synchronizes all replicas
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    if sync != "fsa":       # compute includes the local optimizer step, never the wait
        assert all(0 < c <= t for r in ranks for c, t in zip(r["compute_s"], r["iter_s"]))
