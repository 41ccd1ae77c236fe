"""WAN synchronization policies computed by the scheduler (pure functions, no processes)."""
from __future__ import annotations

from netstorm.geoserver.policy.tree import Policy, Tree

from .planning import NOMINAL_MODEL_BYTES, compute_policy

__all__ = ["cluster_topology", "initial_policy", "measured_topology", "needs_measurement",
           "planning_topology", "random_trees", "star_policy"]


def star_policy(dcs, hub: str, version: int = 1, start_round: int = 0) -> Policy:
    """GeoMX's HiPS star: one global server at ``hub`` aggregates every DC's sum.

    O(len(dcs)).
    """
    dcs = list(dcs)
    if hub not in dcs:
        raise ValueError(f"hub {hub!r} is not one of the DCs {dcs}")
    tree = Tree(root=hub, parent={dc: (None if dc == hub else hub) for dc in dcs})
    return Policy(version=version, start_round=start_round, trees=(tree,))


def cluster_topology(config):
    """The declared WAN of a cluster file as a :class:`netstorm.scheduler.topology.Topology`."""
    from .topology import Topology
    return Topology(name="cluster", dcs=tuple(dc.name for dc in config.dcs),
                    links=config.links)


def needs_measurement(config) -> bool:
    """Multi-root trees need link rates: measure them when the cluster file has none."""
    return config.policy == "fapt" and len(config.dcs) > 1 and not config.links


def measured_topology(config, rates: dict):
    """A full mesh of the measured rates ``{(src, dst): Mbit/s}``; a pair measured at 0 in
    either direction is left out (every pair is a candidate link, if it carries data)."""
    from .topology import Link, Topology, TopologyError
    dcs = [dc.name for dc in config.dcs]
    links = []
    for i, a in enumerate(dcs):
        for b in dcs[i + 1:]:
            ab, ba = rates.get((a, b), 0.0), rates.get((b, a), 0.0)
            if ab > 0 and ba > 0:
                links.append(Link(a, b, round(ab, 3), round(ba, 3)))
    try:
        return Topology(name="measured", dcs=tuple(dcs), links=tuple(links))
    except TopologyError as exc:
        raise ValueError(f"the measured WAN is unusable: {exc}") from exc


def planning_topology(config, measured: dict | None = None):
    """The WAN the first multi-root policy is planned on: the cluster file's links, else
    the start-up measurement's full mesh."""
    return cluster_topology(config) if config.links else measured_topology(config, measured)


def initial_policy(config, measured: dict | None = None):
    """Version 1 of the WAN policy, from the cluster file's links or from ``measured``
    rates: ``(policy, description)``."""
    dcs = [dc.name for dc in config.dcs]
    if config.policy == "star" or len(dcs) == 1:
        return star_policy(dcs, config.hub_dc), f"star rooted at {config.hub_dc}"
    topology = planning_topology(config, measured)
    plan = compute_policy(topology, NOMINAL_MODEL_BYTES, chunk_bytes=config.chunk_bytes,
                          version=1, start_round=0, split=config.trees == "split")
    policy = Policy(version=1, start_round=0, trees=plan.policy.trees,
                    shares=tuple(plan.shares))
    roots = ", ".join(f"{t.root}{' split' if t.split else ''} {100 * s:.0f}%"
                      for t, s in zip(policy.trees, policy.shares))
    return policy, (f"fapt: {len(policy.trees)} trees ({roots}); predicted "
                    f"{plan.predicted_s:.2f}s per {NOMINAL_MODEL_BYTES / 1e6:.0f} MB")


def _random_parent(root: str, dcs: list, rng) -> dict:
    """A random spanning tree of ``dcs`` rooted at ``root``, as dc -> parent. O(n)."""
    order = [dc for dc in dcs if dc != root]
    rng.shuffle(order)
    order = [root] + order
    parent = {root: None}
    for i, dc in enumerate(order[1:], 1):
        parent[dc] = order[rng.randrange(i)]
    return parent


def random_trees(dcs, rng, max_trees: int = 3, split: bool = False):
    """Random spanning trees and shares over ``dcs`` (for testing policy switches); with
    ``split``, about half the trees broadcast along a random tree of their own.
    O(trees · len(dcs))."""
    dcs = list(dcs)
    trees = []
    for _ in range(rng.randint(1, max_trees)):
        order = dcs[:]
        rng.shuffle(order)
        parent = {order[0]: None}
        for i, dc in enumerate(order[1:], 1):
            parent[dc] = order[rng.randrange(i)]
        down = _random_parent(order[0], dcs, rng) if split and rng.random() < 0.5 else None
        trees.append(Tree(order[0], parent, down))
    weights = [rng.random() + 0.1 for _ in trees]
    shares = [w / sum(weights) for w in weights]
    shares[-1] = 1.0 - sum(shares[:-1])
    return trees, shares
