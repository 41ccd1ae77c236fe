"""The keys and gradients of tests/workers/recover_worker.py (shared with the test)."""
import numpy as np

SHAPES = {0: (6, 5), 1: (40_000,)}      # key 1 spans several chunks
OPTIMIZER = {"learning_rate": 0.125, "momentum": 0.5}


def gradient(key, rnd, rank):
    """Small integers: their sums are exact in any order."""
    size = int(np.prod(SHAPES[key]))
    return ((np.arange(size) * (rank + 2) + rnd * (key + 1)) % 7 - 3).astype(
        np.float32).reshape(SHAPES[key])
