"""The time model: predicted seconds of one all-reduce under a set of trees with shares.

For a model of B bytes, tree t puts s_t·B bytes on each of its aggregation edges once up
(child -> parent) and on each of its broadcast edges once down (parent -> child; the same
edges for a shared tree). Chunks stream, so one iteration is predicted as ::

    T = max over directed links e of 8·B·Σ_{t uses e} s_t / (1e6·c_e)      (busiest link)
      + max over trees t (s_t > 0) of fill_t                                 (pipeline fill)

    fill_t = max_v Σ_{hops h on v -> root} (8·chunk_t/1e6 / c_h + d_h)
           + max_v Σ_{hops h on root -> v} (8·chunk_t/1e6 / c_h + d_h),
    chunk_t = min(chunk, s_t·B),   d_h = the hop's one-way delay (s)

``fill_t`` is the time one chunk needs to climb tree t's slowest leaf-to-root path and come
back down its (broadcast tree's) slowest root-to-leaf path, store-and-forward, each hop
paying its propagation delay too: the part of an iteration during which the bottleneck
link cannot be busy yet. Without delays it is at most depth × (chunk time on the slowest
hop). It is not small: 1 MiB at 10-100 Mbit/s is 0.08-0.8 s per hop, so deep trees
pay seconds (it dominates at 64 DCs); and a tree whose share is a single chunk does not
pipeline at all, where adding the two terms over-counts. Latency enters only there: a
round is one pipeline, so each hop's delay is paid once per tree path and round (links
without a ``latency_ms`` count 0; TCP's window growth over a long RTT is not modelled:
the emulator cannot show it, see docs/benchmarks.md). The first term is never below
:func:`~netstorm.scheduler.planning.cut_bound.cut_lower_bound`: every spanning tree crosses
every cut, so all B bytes cross it in each direction. Because each shared tree edge carries
the same bytes up and down, it is only as good as its slower direction: on very asymmetric
links no shared-tree policy gets near the cut bound; split trees (:mod:`.split_trees`) plan
each direction on its own.

``trees_with_shares`` is ``[(Tree, share)]`` (shares >= 0, sum 1), a Policy or a
:class:`PolicyPlan`; k = trees.

Framing: a link's rate counts whole frames, so TCP moves payload at
:data:`TCP_GOODPUT` (1448 bytes of a 1514-byte Ethernet frame, TCP/IPv4 with timestamps)
of it. :func:`predict_iteration_s` and :func:`pipeline_fill_s` take that fraction as
``goodput`` (default 1.0: the rates are payload rates; planning keeps that default, as a
uniform factor changes no choice between policies without delays); the benchmark
predicts with :data:`TCP_GOODPUT`, the emulator's shapers counting frames
(docs/benchmarks.md, "Where the half-rate gap goes").
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from netstorm.geoserver.config.settings import DEFAULT_CHUNK_BYTES  # noqa: F401  (re-exported)
from netstorm.geoserver.policy.tree import Policy

from .network import Net, as_net, down_of, parent_array, up_of

__all__ = ["NOMINAL_MODEL_BYTES", "PolicyPlan", "TCP_GOODPUT", "by_direction", "fill_s", "link_loads",
           "load_matrix", "pipeline_fill_s", "predict", "predict_iteration_s", "tree_pairs"]

# The trees and shares that minimise the bottleneck do not depend on the model's size; only
# the pipeline-fill term does, for which planning assumes this typical model size.
NOMINAL_MODEL_BYTES = 50 * 10**6
# payload per frame byte of TCP/IPv4 with timestamps over Ethernet: 1448 of 1514 bytes
TCP_GOODPUT = 1448 / 1514


def _wire(model_bytes: float, chunk_bytes: float, goodput: float) -> tuple:
    """(model, chunk) bytes as the links count them: the payload over ``goodput``, which
    must lie in (0, 1]. O(1)."""
    if not 0 < goodput <= 1:
        raise ValueError(f"goodput must be in (0, 1], got {goodput!r}")
    return model_bytes / goodput, chunk_bytes / goodput


@dataclass(frozen=True)
class PolicyPlan:
    """A policy, its shares (aligned with ``policy.trees``; ``policy.shares`` holds them
    too), the predicted iteration time, the per-direction busy seconds (every declared
    direction), which method won and each method's prediction."""
    policy: Policy
    shares: tuple
    predicted_s: float
    link_loads: dict
    method: str = ""
    candidates_s: dict = field(default_factory=dict)


def tree_pairs(trees_with_shares) -> list:
    """``[(Tree, share)]`` from such pairs, a Policy or a PolicyPlan; checks the shares.
    O(k)."""
    if isinstance(trees_with_shares, PolicyPlan):
        return list(zip(trees_with_shares.policy.trees, trees_with_shares.shares))
    if isinstance(trees_with_shares, Policy):
        return list(zip(trees_with_shares.trees, trees_with_shares.shares))
    pairs = [(tree, float(share)) for tree, share in trees_with_shares]
    if not pairs:
        raise ValueError("no trees")
    if any(not (s >= 0) for _, s in pairs) or abs(sum(s for _, s in pairs) - 1.0) > 1e-6:
        raise ValueError(f"shares {[s for _, s in pairs]} must be >= 0 and sum to 1")
    return pairs


def load_matrix(net: Net, trees, shares) -> np.ndarray:
    """n x n: Σ of the shares of the trees using each direction (a shared tree's edges both
    ways, a split tree's aggregation edges up and broadcast edges down). O(k·n)."""
    n = len(net.dcs)
    load = np.zeros((n, n))
    for tree, share in zip(trees, shares):
        up, down = up_of(tree), down_of(tree)
        child = np.flatnonzero(up >= 0)
        np.add.at(load, (child, up[child]), share)
        child = np.flatnonzero(down >= 0)
        np.add.at(load, (down[child], child), share)
    return load


def _depths(parent: np.ndarray, cap: np.ndarray, lat: np.ndarray, mbit: float) -> np.ndarray:
    """Σ (mbit/cap + lat)[v, parent[v]] along each DC's path to the root: seconds for a chunk
    of ``mbit`` to get there, store-and-forward. Pointer jumping: O(n log depth)."""
    n = len(parent)
    node = np.arange(n)
    root = parent < 0
    up = np.where(root, node, parent)
    hop = np.where(root, 1.0, cap[node, up])
    cost = np.where(root, 0.0, mbit / hop + lat[node, up])
    for _ in range(n.bit_length() + 1):         # path lengths double each step
        if root[up].all():
            return cost
        cost = cost + cost[up]
        up = up[up]
    raise ValueError(f"parent array {parent.tolist()} is not a tree (a cycle)")


def fill_s(net: Net, tree, share: float, model_bytes: float, chunk_bytes: float) -> float:
    """One tree's pipeline fill in seconds: its first chunk (``min(chunk, share·B)``) up the
    slowest path to the root and back down the slowest path, each hop's transmission plus
    its one-way delay. O(n)."""
    mbit = 8.0 * min(chunk_bytes, share * model_bytes) / 1e6
    up = _depths(up_of(tree), net.cap, net.lat, mbit)
    down = _depths(down_of(tree), net.cap.T, net.lat.T, mbit)
    return float(up.max() + down.max())


def predict(net: Net, parents, shares, model_bytes: float, chunk_bytes: float):
    """(predicted seconds, busy seconds per direction as n x n). O(k·n)."""
    if not model_bytes > 0 or not chunk_bytes > 0:
        raise ValueError(f"model_bytes and chunk_bytes must be > 0, got {model_bytes!r}, "
                         f"{chunk_bytes!r}")
    load = load_matrix(net, parents, shares)
    busy = np.zeros_like(load)
    used = load > 0
    busy[used] = 8.0 * model_bytes * load[used] / (1e6 * net.cap[used])
    fill = max((fill_s(net, p, s, model_bytes, chunk_bytes)
                for p, s in zip(parents, shares) if s > 0), default=0.0)
    return float(busy.max()) + fill, busy


def by_direction(net: Net, busy: np.ndarray) -> dict:
    """``{(u, v): busy[u, v]}`` for every declared direction. O(declared directions)."""
    return {(a, b): float(busy[net.index[a], net.index[b]]) for a, b in net.graph.edges()}


def link_loads(trees_with_shares, topology_or_graph, model_bytes: float) -> dict:
    """Busy time per direction: ``{(u, v): seconds}`` = 8·B·Σ_{t uses u->v} s_t / (1e6·c).

    Every declared direction is a key (0.0 when unused), so the result can be set beside
    measured per-link times. ``trees_with_shares``: ``[(Tree, share)]``, a Policy or a
    PolicyPlan. Raises ValueError for a tree that does not span the DCs over usable links.
    O(k·n + n^2 + declared directions).
    """
    net = as_net(topology_or_graph)
    pairs = tree_pairs(trees_with_shares)
    parents = [parent_array(net, t) for t, _ in pairs]
    _, busy = predict(net, parents, [s for _, s in pairs], model_bytes, DEFAULT_CHUNK_BYTES)
    return by_direction(net, busy)


def pipeline_fill_s(trees_with_shares, topology_or_graph, model_bytes: float,
                    chunk_bytes: float = DEFAULT_CHUNK_BYTES, goodput: float = 1.0) -> float:
    """The pipeline-fill term of the time model alone (see the module docstring; ``goodput``:
    the payload fraction of a link's rate). O(k·n + n^2)."""
    model_bytes, chunk_bytes = _wire(model_bytes, chunk_bytes, goodput)
    net = as_net(topology_or_graph)
    pairs = tree_pairs(trees_with_shares)
    return max((fill_s(net, parent_array(net, t), s, model_bytes, chunk_bytes)
                for t, s in pairs if s > 0), default=0.0)


def predict_iteration_s(trees_with_shares, topology_or_graph, model_bytes: float,
                        chunk_bytes: float = DEFAULT_CHUNK_BYTES,
                        goodput: float = 1.0) -> float:
    """Predicted seconds of one all-reduce of ``model_bytes``: busiest link + pipeline fill.

    ``trees_with_shares``: ``[(Tree, share)]`` (shares >= 0, sum 1), a Policy or a
    PolicyPlan. ``goodput``: the part of a link's rate that is payload (1.0: rates are
    payload rates; :data:`TCP_GOODPUT` for rates that count frames, as the emulator's do):
    every byte and chunk counts 1/goodput times. O(k·n + n^2) for k trees.
    """
    model_bytes, chunk_bytes = _wire(model_bytes, chunk_bytes, goodput)
    net = as_net(topology_or_graph)
    pairs = tree_pairs(trees_with_shares)
    parents = [parent_array(net, t) for t, _ in pairs]
    return predict(net, parents, [s for _, s in pairs], model_bytes, chunk_bytes)[0]
