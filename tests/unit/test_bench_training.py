"""netstorm.bench.training: one worker's training run of each workload (on a local kvstore
here; on the netstorm kvstore in tests/cluster/test_bench_training.py, on every system in
tests/cluster/test_bench.py)."""
import mxnet as mx
import numpy as np
import pytest

from netstorm.bench.training import model_bytes, optimizer_params, push_then_pull, train
from netstorm.bench.worker import parse_args
from unit.test_text_corpus import cached_corpus

LM = ("--workload", "lm", "--hidden", "32", "--heads", "2", "--layers", "1", "--seq-len",
      "8", "--vocab", "64", "--batch-size", "4", "--eval-tokens", "64", "--lr", "0.01")


def worker_args(*argv, extra_s=0.0, compression=None):
    """The worker's own parsing of its command line (train mode, local kvstore)."""
    args = parse_args(["--kvstore", "local", "--out", "unused", "--mode", "train", *argv])
    args.extra_s = extra_s
    args.compression = compression
    return args


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    return cached_corpus(tmp_path, monkeypatch)


def _mlp(**kw):
    return worker_args("--hidden", "64", "--lr", "0.05", "--iters", "40", "--eval-every",
                       "10", **kw)


def test_training_learns_and_records_a_curve_without_evaluation_time():
    times, checks = train(mx.kv.create("local"), _mlp())
    assert len(times) == len(checks["compute_s"]) == 40
    curve = checks["curve"]
    assert [p[2] for p in curve] == [10, 20, 30, 40] and checks["metric"] == "accuracy"
    assert curve[-1][1] > 0.8                                 # it learns digits
    walls = [p[0] for p in curve]
    assert walls == sorted(walls) and walls[-1] <= sum(times) + 0.5
    assert all(c <= t for c, t in zip(checks["compute_s"], times))
    start, end = checks["window_monotonic"]
    pauses = checks["eval_monotonic"]
    assert len(pauses) == 4 and all(a <= b for a, b in pauses)
    assert start <= pauses[0][0] and pauses[-1][0] >= end      # the last after the window
    assert end - start >= sum(times[1:])
    again = train(mx.kv.create("local"), _mlp())[1]
    assert again["weights_sha256"] == checks["weights_sha256"]    # same seed, same weights


def test_a_straggler_computes_longer_and_it_counts_as_compute():
    args = worker_args("--hidden", "16", "--iters", "3", "--eval-every", "3", extra_s=0.05)
    times, checks = train(mx.kv.create("local"), args)
    assert all(c >= 0.05 for c in checks["compute_s"])
    assert checks["curve"][0][0] >= 3 * 0.05


def test_the_cnn_learns_digits():
    args = worker_args("--workload", "cnn-digits", "--hidden", "32", "--lr", "0.05",
                       "--iters", "60", "--eval-every", "30")
    _, checks = train(mx.kv.create("local"), args)
    assert checks["metric"] == "accuracy" and checks["curve"][-1][1] > 0.6
    assert checks["model_bytes"] == 4 * (320 + 18496 + 1024 * 32 + 32 + 32 * 10 + 10)


def test_the_language_model_lowers_its_validation_loss(corpus):
    args = worker_args(*LM, "--data", corpus, "--iters", "60", "--eval-every", "20")
    assert (args.optimizer, args.batch_size) == ("adam", 4)      # the lm's defaults, but
    _, checks = train(mx.kv.create("local"), args)
    curve = checks["curve"]
    assert checks["metric"] == "loss" and [p[2] for p in curve] == [20, 40, 60]
    assert curve[-1][1] < curve[0][1] < np.log(14)          # below a uniform guess
    assert checks["tokens_per_sample"] == 8 and checks["eval_tokens"] == 64
    assert checks["vocab"] == 14 and checks["dataset"] == "html"
    again = train(mx.kv.create("local"), worker_args(*LM, "--data", corpus, "--iters", "60",
                                                      "--eval-every", "20"))[1]
    assert again["weights_sha256"] == checks["weights_sha256"]


def test_model_bytes_counts_the_fp32_gradients(corpus):
    assert model_bytes(worker_args("--hidden", "16")) == \
        4 * (64 * 16 + 16 + 16 * 16 + 16 + 16 * 10 + 10)
    d, v, t = 32, 14, 8
    layer = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert model_bytes(worker_args(*LM, "--data", corpus)) == \
        4 * (v * d + t * d + layer + 2 * d + d * v + v)


def test_optimizer_params_follow_the_optimizer():
    assert optimizer_params(worker_args()) == {"learning_rate": 0.01, "momentum": 0.9}
    assert optimizer_params(worker_args("--optimizer", "adam", "--wd", "0.1")) == \
        {"learning_rate": 0.01, "wd": 0.1}
    dgc = worker_args(compression={"type": "bsc", "momentum": 0.9})
    assert optimizer_params(dgc)["momentum"] == 0.0


def test_push_then_pull_gives_what_pushpull_gives():
    results = []
    for wrap in (False, True):
        kv = mx.kv.create("local")
        if wrap:
            push_then_pull(kv)
        kv.init(3, mx.nd.zeros((4,)))
        out = mx.nd.zeros((4,))
        kv.pushpull(3, [mx.nd.ones((4,)), mx.nd.ones((4,)) * 2], out=out)
        results.append(out.asnumpy())
    assert np.array_equal(results[0], results[1]) and results[0][0] == 3


def test_resume_skips_the_steps_a_restarted_worker_had_done_in_every_mode(capsys):
    """bench resume (the chaos run's worker): the steps to skip are ``kv.resumed_step``
    (diloco: rounds x h), not the rounds; a store without it (another system's) falls
    back on ``resumed_round``; nothing to skip, nothing pulled."""
    from types import SimpleNamespace

    from netstorm.bench.training import resume
    calls = []
    trainer = SimpleNamespace(_optimizer=SimpleNamespace(rescale_grad=None),
                              _init_kvstore=lambda: calls.append("kvstore"),
                              _init_params=lambda: calls.append("params"))
    task = SimpleNamespace(batch=lambda i: (f"batch {i}",))
    args = SimpleNamespace(batch_size=4)
    diloco = SimpleNamespace(rank=3, resumed_round=5, resumed_step=10)
    assert resume(diloco, trainer, calls.append, task, args) == 10
    assert calls == ["batch 11", "kvstore", "params"]
    assert trainer._optimizer.rescale_grad == 0.25
    assert "rank 3 resumes after step 10" in capsys.readouterr().out
    assert resume(SimpleNamespace(rank=1, resumed_round=4), trainer, calls.append, task,
                  args) == 4
    calls.clear()
    assert resume(SimpleNamespace(rank=0, resumed_round=0, resumed_step=0), trainer,
                  calls.append, task, args) == 0 and calls == []


def test_a_rank_that_rejoined_counts_the_steps_its_dc_was_away(tmp_path):
    """bench --chaos: each step notes the rank's progress; a process that resumes after
    step 60 when its previous one last completed step 47 (diloco, h = 10: its last
    synchronization was step 40) did not put steps 41-60 in the model: 20 skipped, added
    to what earlier processes skipped. A worker restarted into its rank skips none."""
    from types import SimpleNamespace

    from netstorm.bench.training import chaos_step, skipped_steps
    args = SimpleNamespace(step_lines=True, out=str(tmp_path), iters=100)
    kv = SimpleNamespace(rank=3, resumed_round=0)
    assert skipped_steps(kv, args, 0) == 0              # no ledger yet
    chaos_step(kv, args, 47, skipped=5)
    kv.resumed_round = 6
    assert skipped_steps(kv, args, 60) == 5 + 20
    kv.resumed_round = 4
    assert skipped_steps(kv, args, 40) == 5             # restarted at its last round
    assert skipped_steps(kv, SimpleNamespace(step_lines=False, out=str(tmp_path)), 60) == 0
