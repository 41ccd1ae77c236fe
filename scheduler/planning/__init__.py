"""Planning multi-root aggregation-tree policies (pure functions, no processes).

A policy is a set of spanning trees T_1..T_k over the DCs; tree t carries a share s_t of the
model (sum 1). Tree edges must be declared links usable both ways: aggregation runs
child -> parent, the broadcast parent -> child (``netstorm.geoserver.server.aggregation``), along
the same edges (a shared tree) or along a broadcast tree of its own (a split tree).
:func:`compute_policy` runs every construction below and keeps the policy with the least
predicted iteration time. Every function takes a
:class:`~netstorm.scheduler.topology.Topology` or a ``networkx.DiGraph`` whose edges carry
``mbps`` (as :meth:`Topology.graph` builds).

One job per module (this package imports them; use the names below):

* :mod:`.network`: the network as arrays (capacities, usable links, trees as parent
  arrays, minimum spanning trees), shared by all the others;
* :mod:`.time_model`: the time model (busiest link + pipeline fill): :func:`link_loads`,
  :func:`pipeline_fill_s`, :func:`predict_iteration_s`; :class:`PolicyPlan`;
  :data:`TCP_GOODPUT` (the payload part of a frame-counting rate); the planning
  defaults :data:`DEFAULT_CHUNK_BYTES` and :data:`NOMINAL_MODEL_BYTES`;
* :mod:`.cut_bound`: the lower bounds no policy beats: :func:`cut_lower_bound` (the
  narrowest cut), :func:`volume_lower_bound_s` (the total bytes over the total rate) and
  their maximum :func:`lower_bound_s`;
* :mod:`.simplex`: the one (dense, exact) simplex: :func:`solve_lp` and the pivoting core;
* :mod:`.shares`: the share LP for fixed trees: :func:`optimal_shares`;
* :mod:`.packing`: fractional spanning-tree packing (Garg-Könemann, then the exact LP and
  column generation): :func:`pack_trees`;
* :mod:`.roots`: where to root a tree: :func:`best_root`;
* :mod:`.fapt`: Fastest Aggregation Path Trees: :func:`fapt_tree`, :func:`fapt_score`,
  :func:`fapt_policy`;
* :mod:`.shallow`: least-depth trees: :func:`shallow_tree`;
* :mod:`.single_trees`: the best single tree: :func:`best_star`, :func:`best_single_tree`;
* :mod:`.arborescence`: least-cost in- and out-arborescences (Chu-Liu/Edmonds);
* :mod:`.split_trees`: split trees by column generation: :func:`split_packing`;
* :mod:`.two_level`: depth-two split trees by multiplicative weights, the large meshes'
  candidate: :func:`two_level_packing`;
* :mod:`.compute`: :func:`compute_policy`, which picks the method.

Benchmark helpers (random meshes, planning time) are in ``netstorm.bench.planning``.
"""
from .compute import MAX_MIXED_COLUMNS, TREES_PER_DC, compute_policy
from .cut_bound import (MAX_CUT_DCS, cut_lower_bound, cut_lower_bound_s, lower_bound_s,
                        volume_lower_bound_s)
from .fapt import fapt_policy, fapt_score, fapt_tree
from .network import MAX_POLICY_TREES
from .packing import HEAVIEST_START_MAX_DCS, Packing, pack_trees, pack_trees_detail
from .roots import best_root
from .shallow import shallow_tree
from .shares import optimal_shares
from .simplex import LPError, LPResult, solve_lp
from .single_trees import best_single_tree, best_star
from .split_trees import SPLIT_MAX_DCS, split_packing
from .two_level import two_level_packing, two_level_parent
from .time_model import (DEFAULT_CHUNK_BYTES, NOMINAL_MODEL_BYTES, TCP_GOODPUT, PolicyPlan,
                         link_loads, pipeline_fill_s, predict_iteration_s)

__all__ = [
    "DEFAULT_CHUNK_BYTES", "HEAVIEST_START_MAX_DCS", "LPError", "LPResult", "MAX_CUT_DCS",
    "MAX_MIXED_COLUMNS", "MAX_POLICY_TREES", "NOMINAL_MODEL_BYTES", "Packing", "PolicyPlan",
    "SPLIT_MAX_DCS", "TCP_GOODPUT", "TREES_PER_DC", "split_packing", "lower_bound_s",
    "two_level_packing", "two_level_parent", "volume_lower_bound_s",
    "best_root", "best_single_tree", "best_star", "compute_policy", "cut_lower_bound",
    "cut_lower_bound_s", "fapt_policy", "fapt_score", "fapt_tree", "link_loads",
    "optimal_shares", "pack_trees", "pack_trees_detail", "pipeline_fill_s",
    "predict_iteration_s", "shallow_tree", "solve_lp",
]
