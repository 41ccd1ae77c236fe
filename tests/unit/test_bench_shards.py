"""netstorm.bench.shards: each worker's samples, their order per epoch, and a shard too
small for a batch refused by name (the MXNet and PyTorch tasks' common part)."""
from types import SimpleNamespace

import numpy as np
import pytest

from netstorm.bench.shards import Epochs, digits_shard, lm_shard
from unit.test_text_corpus import cached_corpus


def test_epochs_visit_every_sample_once_per_epoch_in_a_seeded_order():
    epochs = Epochs(10, 3, 3, np.random.RandomState(0))
    first = np.concatenate([epochs.indices(it) for it in (1, 2, 3)])
    second = np.concatenate([epochs.indices(it) for it in (4, 5, 6)])
    assert len(set(first)) == len(set(second)) == 9 and not np.array_equal(first, second)
    again = Epochs(10, 3, 3, np.random.RandomState(0))
    assert np.array_equal(np.concatenate([again.indices(it) for it in (1, 2, 3)]), first)


def test_the_digits_shards_of_three_workers_split_the_training_images():
    args = SimpleNamespace(data="digits", seed=0, batch_size=32)
    parts = [digits_shard(args, rank, 3) for rank in range(3)]
    total = parts[0].info["train_samples"]
    assert sum(len(p.x) for p in parts) == total
    smallest = min(len(p.x) for p in parts)     # every worker steps as often
    assert [p.epochs.batches for p in parts] == [smallest // 32] * 3
    first = [p.epochs.indices(1) for p in parts]       # each rank its own order
    assert not np.array_equal(first[0], first[1])


def test_a_shard_smaller_than_a_batch_is_refused_naming_the_worker_and_the_flag(
        tmp_path, monkeypatch):
    corpus = cached_corpus(tmp_path, monkeypatch)
    args = SimpleNamespace(data=corpus, vocab=64, seq_len=8, eval_tokens=64, seed=0,
                           batch_size=10 ** 6)
    with pytest.raises(ValueError, match=r"worker 1's shard has \d+ windows.*--batch-size"):
        lm_shard(args, 1, 2)
    args.batch_size = 4
    part = lm_shard(args, 1, 2)
    assert part.train.shape[1] == 9 and part.info["shard_windows"] == len(part.train)
    assert part.held_out.shape == (8, 9)
