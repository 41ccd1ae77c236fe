"""netstorm.bench.tasks: each rank's shard and batches, and what rank 0 evaluates on."""
import numpy as np
import pytest

from netstorm.bench.tasks import mean_loss, prepare
from netstorm.text_corpus import load_corpus, windows
from unit.test_bench_training import LM, worker_args
from unit.test_text_corpus import cached_corpus


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    return cached_corpus(tmp_path, monkeypatch)


def test_each_rank_trains_on_its_own_contiguous_part_of_the_token_stream(corpus):
    args = worker_args(*LM, "--data", corpus)
    tokens = load_corpus(corpus, args.vocab).train
    seen = []
    for rank in range(3):
        task = prepare(args, rank, 3)
        data, label = task.batch(1)
        assert data.shape == label.shape == (4, 8)
        np.testing.assert_array_equal(data.asnumpy()[:, 1:], label.asnumpy()[:, :-1])
        part = tokens[rank * (len(tokens) // 3):(rank + 1) * (len(tokens) // 3)]
        rows = {tuple(w) for w in windows(part, 8)[:, :-1]}
        assert all(tuple(row) in rows for row in data.asnumpy().astype(int))
        seen.append(task.info["shard_windows"])
    assert len(set(seen)) == 1           # every rank steps the same number of times


def test_rank_0_evaluates_the_same_validation_windows_every_time(corpus):
    args = worker_args(*LM, "--data", corpus, "--eval-tokens", "40")
    task = prepare(args, 0, 1)
    assert task.info["eval_tokens"] == 40
    assert task.evaluate() == task.evaluate()
    held_out = windows(load_corpus(corpus, args.vocab).valid, 8)[:5]
    assert abs(task.evaluate() - mean_loss(task.net, task.loss_fn, held_out,
                                           batch_size=2)) < 1e-5    # batching aside
