"""compute_policy: the planner's façade method, which runs every construction and keeps
the policy with the least predicted iteration time.

The share LP minimises the busiest link only; the time model adds the pipeline fill, a max
over trees, so every multi-tree candidate is then trimmed while that lowers the prediction.
n = DCs.
"""
from __future__ import annotations

import numpy as np

from netstorm.geoserver.policy.tree import Policy

from .fapt import fapt_all, fapt_candidates
from .network import MAX_POLICY_TREES, Net, as_net, edge_key, parent_array, to_tree, tree_cap
from .packing import pack_trees_detail
from .shallow import shallow_parent
from .shares import capped_shares, solve_shares
from .simplex import LPError
from .single_trees import best_single, single_candidates
from .split_trees import SPLIT_MAX_DCS, split_pool
from .time_model import DEFAULT_CHUNK_BYTES, PolicyPlan, by_direction, fill_s, predict
from .two_level import two_level_candidate

__all__ = ["MAX_MIXED_COLUMNS", "SWEEP_STEPS", "TREES_PER_DC", "compute_policy"]

MAX_MIXED_COLUMNS = 64             # compute_policy's "mixed" LP only up to this many trees
TREES_PER_DC = 4                   # compute_policy's default tree cap: this many per DC
SWEEP_STEPS = 6                    # fill thresholds _fill_sweep tries


def _distinct(parents: list) -> list:
    """The first tree of every edge set. O(k·n log n)."""
    seen, out = set(), []
    for parent in parents:
        key = edge_key(parent)
        if key not in seen:
            seen.add(key)
            out.append(parent)
    return out


def _trim_fill(net: Net, parents: list, shares: list, model_bytes, chunk_bytes):
    """Drop the tree with the largest pipeline fill and re-solve the shares, while that
    lowers the predicted time (the LP sees only the busiest link; the fill is a max over
    trees). Returns (parents, shares, predicted, busy). O(trees·LP edits) at worst."""
    predicted, busy = predict(net, parents, shares, model_bytes, chunk_bytes)
    lp = None
    while len(parents) > 1:
        if lp is None:
            _, _, lp = solve_shares(net, parents)
            if lp is None:
                break
            tree_of = dict(enumerate(parents))
        fills = [fill_s(net, p, s, model_bytes, chunk_bytes) for p, s in zip(parents, shares)]
        worst = parents[int(np.argmax(fills))]
        try:
            lp.remove_column(next(t for t, p in tree_of.items() if p is worst))
            lp.solve()
        except LPError:
            break
        new_shares, _ = lp.result()
        rest = [(tree_of[t], float(s)) for t, s in zip(lp.ids(), new_shares) if s > 0]
        cand = [p for p, _ in rest], [s for _, s in rest]
        t, b = predict(net, cand[0], cand[1], model_bytes, chunk_bytes)
        if not t < predicted * (1 - 1e-12):
            break
        (parents, shares), predicted, busy = cand, t, b
    return parents, shares, predicted, busy


def _fill_sweep(net: Net, pool: list, max_trees: int, model_bytes, chunk_bytes):
    """The LP shares the busiest link only, so a large pool buys a low busiest link with
    deep trees: for :data:`SWEEP_STEPS` thresholds F (quantiles of the pool's fills), the
    trees whose fill is at most F get LP shares (capped at ``max_trees``) and are trimmed
    (:func:`_trim_fill`); the best prediction wins. Returns (trees, shares, predicted,
    busy). O(SWEEP_STEPS·(LP + trim))."""
    fills = np.array([fill_s(net, t, 1.0, model_bytes, chunk_bytes) for t in pool])
    best = None
    for limit in np.unique(np.quantile(fills, np.linspace(0, 1, SWEEP_STEPS))):
        chosen = [t for t, f in zip(pool, fills) if f <= limit * (1 + 1e-12)]
        trees, shares = capped_shares(net, chosen, max_trees)
        found = _trim_fill(net, trees, shares, model_bytes, chunk_bytes)
        if best is None or found[2] < best[2] * (1 - 1e-12):
            best = found
    return best


def compute_policy(topology, model_bytes: float, chunk_bytes: float = DEFAULT_CHUNK_BYTES,
                   version: int = 1, start_round: int = 0, max_trees: int = None,
                   epsilon: float = 0.05, split: bool = True) -> PolicyPlan:
    """The multi-root policy with the least predicted iteration time for ``model_bytes``.

    Candidates, all scored by the same time model (:func:`predict_iteration_s`), in order
    of preference when predictions tie (fewer or simpler trees first):

    * ``single``: :func:`best_single_tree` (includes the best star);
    * ``fapt``: :func:`fapt_policy` (one FAPT tree per root, LP shares);
    * ``packing``: :func:`pack_trees` (Garg-Könemann + exact LP + column generation);
    * ``shallow``: one :func:`shallow_tree` per root with LP shares (a sharded star on a
      full mesh: least pipeline fill);
    * ``mixed``: packing and shallow trees in one LP (only while they are at most
      :data:`MAX_MIXED_COLUMNS` distinct trees; its LP grows about cubically);
    * ``split`` (unless ``split`` is False): up to :data:`~.split_trees.SPLIT_MAX_DCS`
      DCs, split and shared trees
      (:func:`~.split_trees.split_pool`: column generation from the packing and shallow
      trees), then a sweep over fill thresholds (:func:`_fill_sweep`);
    * ``two-level`` (unless ``split`` is False): depth-two split trees, equal shares,
      packed by multiplicative weights (:func:`~.two_level.two_level_candidate`; where
      some DC is more than two hops from some root, none): the large meshes' candidate,
      whose fill stays at two hops each way.

    The LP minimises the busiest link only, so every multi-tree candidate is then trimmed:
    its tree with the largest fill leaves (shares re-solved) while that lowers the
    prediction. At most ``max_trees`` trees (default :data:`TREES_PER_DC` per DC; never
    more than 255): a tree's first chunk is min(chunk, share·B), so more trees with smaller
    shares fill the pipeline sooner. Above :data:`~.split_trees.SPLIT_MAX_DCS` DCs the
    LP-based candidates keep at most n trees (the share LP over more costs seconds at 64
    DCs); ``two-level`` needs no LP and may use them all. ``topology``: a
    Topology or DiGraph. Returns a :class:`PolicyPlan`; its policy carries the shares,
    heaviest tree first. Cost: pack_trees + O(n^3) for the FAPT and shallow trees + a few
    LPs (+ the split trees' column generation up to 12 DCs, about 0.3 s there); about
    0.5 s CPU for 64 DCs (see docs/policy.md).
    """
    net = as_net(topology)
    n = len(net.dcs)
    max_trees = tree_cap(net, TREES_PER_DC * n if max_trees is None else max_trees)
    lp_trees = max_trees if n <= SPLIT_MAX_DCS else min(max_trees, n)
    fapt = fapt_all(net)
    single = best_single(net, single_candidates(net, fapt), model_bytes, chunk_bytes)[0]
    packing = pack_trees_detail(net, epsilon=epsilon, max_trees=lp_trees)
    options = {"single": ([single], [1.0]),
               "fapt": capped_shares(net, fapt_candidates(net, model_bytes, chunk_bytes, fapt),
                                     lp_trees),
               "packing": ([parent_array(net, t) for t in packing.trees], packing.shares)}
    shallow = _distinct([shallow_parent(net, r) for r in range(len(net.dcs))])
    options["shallow"] = capped_shares(net, shallow, lp_trees)
    union = _distinct(options["packing"][0] + shallow)
    if len(union) <= MAX_MIXED_COLUMNS:
        options["mixed"] = capped_shares(net, union, lp_trees)
    scored = {}
    for name, (parents, shares) in options.items():
        scored[name] = _trim_fill(net, list(parents), list(shares), model_bytes, chunk_bytes)
    if split and n <= SPLIT_MAX_DCS:
        pool = split_pool(net, union, MAX_POLICY_TREES)
        scored["split"] = _fill_sweep(net, pool, max_trees, model_bytes, chunk_bytes)
    if split:
        found = two_level_candidate(net, max_trees, model_bytes, chunk_bytes)
        if found is not None:
            scored["two-level"] = found
    order = list(scored)
    method = min(order, key=lambda name: (scored[name][2] * (1 + 1e-12 * order.index(name))))
    parents, shares, predicted, busy = scored[method]
    ranked = sorted(range(len(parents)), key=lambda i: -shares[i])
    shares = tuple(float(shares[i]) for i in ranked)
    shares = shares[:-1] + (1.0 - sum(shares[:-1]),)
    policy = Policy(version=version, start_round=start_round,
                    trees=tuple(to_tree(net, parents[i]) for i in ranked), shares=shares)
    return PolicyPlan(policy=policy, shares=shares, predicted_s=predicted,
                      link_loads=by_direction(net, busy),
                      method=method, candidates_s={k: v[2] for k, v in scored.items()})
