"""netstorm.datasets: offline data (scikit-learn's digits, MNIST-format IDX files)."""
import gzip
import sys

import numpy as np
import pytest

from netstorm.datasets import (IDX_IMAGES, IDX_LABELS, DatasetError, load, read_idx, shard,
                               write_idx)


def test_digits_split_is_deterministic_disjoint_and_normalized():
    a, b = load("digits", seed=3), load("digits", seed=3)
    assert a.x_train.shape == (1438, 1, 8, 8) and a.x_test.shape == (359, 1, 8, 8)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert 0.0 <= a.x_train.min() and a.x_train.max() <= 1.0
    other = load("digits", seed=4)
    assert not np.array_equal(a.y_train, other.y_train)
    train_rows = {row.tobytes() for row in a.x_train}
    assert sum(row.tobytes() in train_rows for row in a.x_test) < 5   # digits has a few twins


def _idx_dir(tmp_path, compress=False):
    """MNIST-format files made from digits (8x8 images scaled to 0..255)."""
    d = load("digits", seed=1)
    parts = {"train-images-idx3-ubyte": (d.x_train[:, 0] * 255).round(),
             "train-labels-idx1-ubyte": d.y_train,
             "t10k-images-idx3-ubyte": (d.x_test[:, 0] * 255).round(),
             "t10k-labels-idx1-ubyte": d.y_test}
    for name, array in parts.items():
        path = tmp_path / name
        write_idx(str(path), array)
        if compress:
            path.with_name(name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
            path.unlink()
    return d


@pytest.mark.parametrize("compress", [False, True])
def test_idx_files_round_trip(tmp_path, compress):
    d = _idx_dir(tmp_path, compress)
    m = load(str(tmp_path))
    assert m.x_train.shape == d.x_train.shape and m.x_test.shape == d.x_test.shape
    assert np.array_equal(m.y_train, d.y_train)
    assert np.abs(m.x_train - d.x_train).max() <= 0.5 / 255 + 1e-6


def test_bad_idx_files_are_named(tmp_path):
    _idx_dir(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(b"\0\0\x08")
    with pytest.raises(DatasetError, match="t10k-labels-idx1-ubyte: bad IDX magic"):
        load(str(tmp_path))
    write_idx(str(tmp_path / "t10k-labels-idx1-ubyte"), np.zeros(3))
    with pytest.raises(DatasetError, match="t10k has 359 images but 3 labels"):
        load(str(tmp_path))
    (tmp_path / "train-images-idx3-ubyte").unlink()
    with pytest.raises(DatasetError, match="not found: .*train-images-idx3-ubyte"):
        load(str(tmp_path))
    header = bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big")
    (tmp_path / "short").write_bytes(header + b"\1\2")
    with pytest.raises(DatasetError, match="expected 10 values, found 2"):
        read_idx(str(tmp_path / "short"), IDX_LABELS)
    with pytest.raises(DatasetError, match="neither 'digits' nor a directory"):
        load(str(tmp_path / "nowhere"))
    assert IDX_IMAGES == 2051 and IDX_LABELS == 2049     # MNIST's published magic numbers


def test_shards_are_disjoint_and_step_the_same_number_of_times():
    x, y = np.arange(103), np.arange(103)
    shards = [shard(x, y, r, 4, 5) for r in range(4)]
    assert {s[2] for s in shards} == {25 // 5}                  # 103 = 26+26+26+25
    assert sorted(np.concatenate([s[0] for s in shards]).tolist()) == list(range(103))


def test_the_digits_without_scikit_learn_name_the_extra_that_brings_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)     # import fails
    with pytest.raises(DatasetError,
                       match=r"needs scikit-learn .*pip install 'netstorm\[examples\]'"):
        load("digits")
