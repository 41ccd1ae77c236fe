"""IP routes of the emulated WAN: which neighbour each DC forwards to, per destination."""
from __future__ import annotations

import networkx as nx

from netstorm.scheduler.topology import Topology

__all__ = ["next_hops", "path_delays_ms", "shortest_paths"]


def shortest_paths(topology: Topology) -> dict:
    """Hop-count shortest path for every ordered pair of DCs: ``{(a, b): (a, ..., b)}``.

    Ties are broken deterministically by giving link k (0-based, in file order) the weight
    ``2**E + 2**k``: hop count decides first, then the path whose latest-listed link is
    earliest in the file wins. All shortest paths are then unique, so the set is consistent
    with destination-based IP forwarding (every sub-path of a chosen path is itself chosen)
    and symmetric (the path b -> a is the path a -> b reversed). O(V * E log V) big-int
    Dijkstra.
    """
    top = 1 << len(topology.links)
    graph = nx.Graph()
    graph.add_nodes_from(topology.dcs)
    for k, link in enumerate(topology.links):
        graph.add_edge(link.a, link.b, weight=top + (1 << k))
    paths = {}
    for src in topology.dcs:
        found = nx.single_source_dijkstra_path(graph, src, weight="weight")
        for dst in topology.dcs:
            if dst != src:
                paths[(src, dst)] = tuple(found[dst])
    return paths


def next_hops(topology: Topology) -> dict:
    """``{(dc, destination): neighbour to forward to}`` from :func:`shortest_paths`. O(V^2)."""
    return {pair: path[1] for pair, path in shortest_paths(topology).items()}


def path_delays_ms(topology: Topology) -> dict:
    """``{(a, b): one-way ms}``: the links' ``latency_ms`` summed along the route from ``a``
    to ``b`` (:func:`shortest_paths`, the path IP forwarding takes here). O(V^2 · path)."""
    delays = {}
    for (a, b), path in shortest_paths(topology).items():
        delays[(a, b)] = sum(topology.link(u, v).latency_ms for u, v in zip(path, path[1:]))
    return delays
