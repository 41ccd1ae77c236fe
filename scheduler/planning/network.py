"""The network as arrays, shared by every planning module: capacities, usable links, trees as
parent arrays, minimum spanning trees.

A link is usable iff both its directions exist with a rate > 0 (a tree edge carries the
partial sums up and the total down). DC order (for ties) is the topology's ``dcs`` or the
graph's node order. n = DCs, m = undirected usable links. A shared tree is a parent array
of n positions, -1 at the root (each DC's neighbour towards the root: partial sums go up
its edges, the total comes down the same edges); a split tree is a :class:`Split` of two
such arrays with the same root (the total descends its own tree).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import networkx as nx
import numpy as np

from netstorm.geoserver.policy.tree import PolicyError, Tree

from ..topology import Topology

__all__ = ["MAX_POLICY_TREES", "Net", "Split", "as_net", "dc_index", "down_of", "edge_key",
           "inverse", "mst", "parent_array", "split_or_shared", "to_tree", "tree_cap", "up_of"]

MAX_POLICY_TREES = 255             # geoserver.tree.Policy's limit (one byte on the wire)


@dataclass(frozen=True)
class Net:
    dcs: tuple                 # names, in tie-breaking order
    index: dict                # name -> position
    cap: np.ndarray            # n x n Mbit/s of usable directions (both ways exist), else 0
    edges: tuple               # usable undirected links (i, j), i < j
    graph: nx.DiGraph          # every declared direction, for link_loads' keys
    lat: np.ndarray            # n x n one-way delay (s) of usable directions, else 0


class Split(NamedTuple):
    """A split tree: ``up[v]`` is the DC v sends its partial sum to (an in-arborescence
    into the root), ``down[v]`` the DC v receives the total from (an out-arborescence from
    the same root); -1 at the root."""
    up: np.ndarray
    down: np.ndarray


def up_of(tree) -> np.ndarray:
    """The aggregation parent array of a planning tree (array or :class:`Split`). O(1)."""
    return tree.up if isinstance(tree, Split) else tree


def down_of(tree) -> np.ndarray:
    """The broadcast parent array of a planning tree (array or :class:`Split`). O(1)."""
    return tree.down if isinstance(tree, Split) else tree


def split_or_shared(up: np.ndarray, down: np.ndarray):
    """``up`` itself when both trees have the same edges, else ``Split(up, down)``. O(n)."""
    return up if np.array_equal(up, down) else Split(up, down)


def as_net(topology_or_graph) -> Net:
    """Arrays of a Topology, a ``networkx.DiGraph`` whose edges carry ``mbps`` and optionally
    ``latency_s`` (as :meth:`Topology.graph` builds) or a :class:`Net` (returned as is).
    Raises ValueError if the usable links do not connect the DCs. O(n^2 + m)."""
    if isinstance(topology_or_graph, Net):
        return topology_or_graph
    if isinstance(topology_or_graph, Topology):
        graph = topology_or_graph.graph()
        dcs = tuple(topology_or_graph.dcs)
    elif isinstance(topology_or_graph, nx.DiGraph):
        graph = topology_or_graph
        dcs = tuple(graph.nodes)
    else:
        raise TypeError(f"expected a Topology or networkx.DiGraph, got "
                        f"{type(topology_or_graph).__name__}")
    if len(dcs) < 2:
        raise ValueError(f"a policy needs at least 2 DCs, got {list(dcs)}")
    index = {dc: i for i, dc in enumerate(dcs)}
    n = len(dcs)
    cap, lat = np.zeros((n, n)), np.zeros((n, n))
    for a, b, data in graph.edges(data=True):
        mbps = data.get("mbps", 0.0)
        if a != b and mbps is not None and mbps > 0 and math.isfinite(mbps):
            cap[index[a], index[b]] = float(mbps)
            delay = data.get("latency_s", 0.0)
            if delay is not None and delay > 0 and math.isfinite(delay):
                lat[index[a], index[b]] = float(delay)
    both = (cap > 0) & (cap.T > 0)
    cap, lat = np.where(both, cap, 0.0), np.where(both, lat, 0.0)
    edges = tuple((int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(both, 1))))
    und = nx.Graph()
    und.add_nodes_from(range(n))
    und.add_edges_from(edges)
    if not nx.is_connected(und):
        parts = sorted(sorted(dcs[i] for i in c) for c in nx.connected_components(und))
        raise ValueError(f"the links usable both ways do not connect the DCs: {parts}")
    return Net(dcs, index, cap, edges, graph, lat)


def _array(net: Net, root: str, parent: dict) -> np.ndarray:
    out = np.full(len(net.dcs), -1, dtype=np.int64)
    for dc, up in parent.items():
        if up is not None:
            i, j = net.index[dc], net.index[up]
            if net.cap[i, j] <= 0:
                raise ValueError(f"tree rooted at {root!r} uses {dc}-{up}, which is not "
                                 f"a link usable both ways")
            out[i] = j
    return out


def parent_array(net: Net, tree: Tree):
    """A Tree as a parent array (-1 at the root), or a :class:`Split` of two for a split
    tree; checks it spans the DCs over usable links. O(n)."""
    try:
        tree.validate(net.dcs)
    except PolicyError as exc:
        raise ValueError(str(exc)) from exc
    up = _array(net, tree.root, tree.parent)
    return up if tree.down is None else Split(up, _array(net, tree.root, tree.down))


def _names(net: Net, parent: np.ndarray) -> dict:
    return {net.dcs[i]: (None if p < 0 else net.dcs[int(p)]) for i, p in enumerate(parent)}


def to_tree(net: Net, tree) -> Tree:
    """A parent array (or a :class:`Split`) as a Tree of DC names. O(n)."""
    up = up_of(tree)
    return Tree(root=net.dcs[int(np.flatnonzero(up < 0)[0])], parent=_names(net, up),
                down=_names(net, tree.down) if isinstance(tree, Split) else None)


def dc_index(net: Net, dc: str) -> int:
    """The position of DC ``dc``; ValueError naming the DCs if there is none. O(1)."""
    if dc not in net.index:
        raise ValueError(f"root {dc!r} is not one of the DCs {list(net.dcs)}")
    return net.index[dc]


def edge_key(tree) -> tuple:
    """A shared tree's undirected edge set, independent of its root; for a split tree its
    two parent arrays (directed, rooted). O(n log n)."""
    if isinstance(tree, Split):
        return ("split", tree.up.tobytes(), tree.down.tobytes())
    return tuple(sorted((min(i, int(p)), max(i, int(p))) for i, p in enumerate(tree) if p >= 0))


def tree_cap(net: Net, max_trees) -> int:
    """The number of trees a policy may hold: ``max_trees`` (default n), at most
    :data:`MAX_POLICY_TREES`. O(1)."""
    return min(MAX_POLICY_TREES, len(net.dcs) if max_trees is None else int(max_trees))


def mst(cost: np.ndarray) -> np.ndarray:
    """Prim on a dense symmetric cost matrix (inf: no edge); parent array rooted at DC 0,
    ties to the lowest index. O(n^2)."""
    n = cost.shape[0]
    parent = np.full(n, -1, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    done[0] = True
    best = cost[0].copy()
    link = np.zeros(n, dtype=np.int64)
    best[0] = np.inf
    for _ in range(n - 1):
        v = int(np.argmin(np.where(done, np.inf, best)))
        parent[v] = link[v]
        done[v] = True
        closer = cost[v] < best
        best[closer] = cost[v][closer]
        link[closer] = v
    return parent


def inverse(rates: np.ndarray, missing: float = 0.0) -> np.ndarray:
    """1/rate where the rate is > 0, else ``missing``: seconds per Mbit of each direction
    (or of each link, for a matrix of link rates). O(n^2)."""
    usable = rates > 0
    return np.where(usable, 1.0 / np.where(usable, rates, 1.0), missing)
