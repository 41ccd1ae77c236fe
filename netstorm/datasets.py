"""Real training data that needs no download, for the examples and ``bench.py --mode train``.

* ``digits``: scikit-learn's bundled 8x8 handwritten digits (1,797 images), a deterministic
  80/20 split from a seed;
* a directory: MNIST-format IDX files (MNIST, Fashion-MNIST: ``train-images-idx3-ubyte``,
  ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each
  optionally ``.gz``), with their official train/test split.

Images come as ``(N, 1, H, W)`` float32 in [0, 1], labels as float32. Nothing is ever
downloaded; a missing or malformed file is a :class:`DatasetError` naming it.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass

import numpy as np

__all__ = ["Dataset", "DatasetError", "IDX_IMAGES", "IDX_LABELS", "load", "load_digits_data",
           "load_mnist_idx", "read_idx", "shard", "write_idx"]

IDX_IMAGES, IDX_LABELS = 0x0803, 0x0801   # IDX magic: unsigned bytes, 3-D images, 1-D labels


class DatasetError(ValueError):
    """A dataset that cannot be loaded; the text names the file and the cause."""


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load(spec: str, seed: int = 42) -> Dataset:
    """``'digits'`` or a directory of IDX files (see the module docstring)."""
    if spec == "digits":
        return Dataset("digits", *load_digits_data(seed))
    if not os.path.isdir(spec):
        raise DatasetError(f"data {spec!r} is neither 'digits' nor a directory of MNIST IDX "
                           f"files")
    return Dataset(os.path.basename(os.path.normpath(spec)), *load_mnist_idx(spec))


def load_digits_data(seed: int):
    """sklearn digits as (N,1,8,8) float32 in [0,1]; deterministic 80/20 split.
    DatasetError (naming the extra that brings it) when scikit-learn is not installed."""
    try:
        from sklearn.datasets import load_digits   # noqa: PLC0415  (only when asked for)
    except ImportError as exc:
        raise DatasetError(f"the digits data needs scikit-learn ({exc}): pip install "
                           f"'netstorm[examples]'") from None
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.float32)
    perm = np.random.RandomState(seed).permutation(len(x))
    n_train = int(round(0.8 * len(x)))
    tr, te = perm[:n_train], perm[n_train:]
    return x[tr], y[tr], x[te], y[te]


def read_idx(path: str, expected_magic: int) -> np.ndarray:
    """One IDX file of unsigned bytes (``path`` or ``path.gz``), shaped as it declares."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path = path + ".gz"
    if not os.path.exists(path):
        raise DatasetError(f"MNIST file not found: {path}[.gz]")
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise DatasetError(f"{path}: {exc}") from None
    magic = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
    if magic != expected_magic:
        raise DatasetError(f"{path}: bad IDX magic {magic} (expected {expected_magic})")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise DatasetError(f"{path}: truncated IDX header")
    dims = tuple(int(v) for v in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DatasetError(f"{path}: expected {int(np.prod(dims))} values, found {data.size}")
    return data.reshape(dims)


def load_mnist_idx(data_dir: str):
    """MNIST from IDX files as (N,1,28,28) float32 in [0,1] (official train/test split)."""
    def images(name):
        a = read_idx(os.path.join(data_dir, name), IDX_IMAGES)
        if a.ndim != 3:
            raise DatasetError(f"{os.path.join(data_dir, name)}: images must be 3-D, "
                               f"got shape {a.shape}")
        return (a.astype(np.float32) / 255.0).reshape(-1, 1, a.shape[1], a.shape[2])

    def labels(name):
        return read_idx(os.path.join(data_dir, name), IDX_LABELS).astype(np.float32)

    x_tr, y_tr = images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte")
    x_te, y_te = images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte")
    for x, y, part in ((x_tr, y_tr, "train"), (x_te, y_te, "t10k")):
        if len(x) != len(y):
            raise DatasetError(f"{data_dir}: {part} has {len(x)} images but {len(y)} labels")
    return x_tr, y_tr, x_te, y_te


def shard(x, y, rank: int, num_workers: int, batch_size: int):
    """Worker ``rank`` takes samples rank, rank+N, ...; returns its shard and the batches per
    epoch, counted on the smallest shard so that every worker steps the same number of times.
    """
    n = len(x)
    min_len = min(len(range(r, n, num_workers)) for r in range(num_workers))
    return x[rank::num_workers], y[rank::num_workers], min_len // batch_size


def write_idx(path: str, array: np.ndarray) -> None:
    """Write uint8 ``array`` as an IDX file (the inverse of :func:`read_idx`): to turn other
    data into MNIST-format files, e.g. for tests."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim])        # unsigned bytes, then the dimensions
    with open(path, "wb") as f:
        f.write(header + np.array(array.shape, dtype=">u4").tobytes() + array.tobytes())
