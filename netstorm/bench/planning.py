"""Planning-time benchmark helpers: random full meshes and the CPU time of
:func:`netstorm.scheduler.planning.compute_policy` on them (docs/policy.md's timings)."""
from __future__ import annotations

import time

import numpy as np

from netstorm.scheduler.planning import compute_policy
from netstorm.scheduler.topology import Link, Topology

__all__ = ["RESNET18_BYTES", "random_full_mesh", "time_policy"]

RESNET18_BYTES = 46758048          # float32 resnet18 parameters, the benchmark's model


def random_full_mesh(n: int, seed: int, low: float = 10.0, high: float = 100.0) -> Topology:
    """n DCs dc0.., full mesh, each direction uniform in [low, high) Mbit/s from
    ``numpy.random.default_rng(seed)``, rounded to 0.1. O(n^2)."""
    rng = np.random.default_rng(seed)
    dcs = tuple(f"dc{i}" for i in range(n))
    links = []
    for i in range(n):
        for j in range(i + 1, n):
            ab, ba = rng.uniform(low, high, size=2)
            links.append(Link(dcs[i], dcs[j], round(float(ab), 1), round(float(ba), 1)))
    return Topology(f"mesh{n}", dcs, tuple(links))


def time_policy(n: int, seed: int, model_bytes: float = RESNET18_BYTES) -> float:
    """CPU seconds (process time, so other load on the machine inflates it less than wall
    time) of :func:`compute_policy` on :func:`random_full_mesh` (n, seed); building the
    topology is not timed. O(compute_policy) for n DCs."""
    topology = random_full_mesh(n, seed)
    start = time.process_time()
    compute_policy(topology, model_bytes)
    return time.process_time() - start
