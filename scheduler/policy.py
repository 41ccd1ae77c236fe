"""WAN synchronization policies computed by the scheduler (pure functions, no processes)."""
from __future__ import annotations

from geoserver.tree import Policy, Tree


def star_policy(dcs, hub: str, version: int = 1, start_round: int = 0) -> Policy:
    """GeoMX's HiPS star: one global server at ``hub`` aggregates every DC's sum.

    O(len(dcs)).
    """
    dcs = list(dcs)
    if hub not in dcs:
        raise ValueError(f"hub {hub!r} is not one of the DCs {dcs}")
    tree = Tree(root=hub, parent={dc: (None if dc == hub else hub) for dc in dcs})
    return Policy(version=version, start_round=start_round, trees=(tree,))
