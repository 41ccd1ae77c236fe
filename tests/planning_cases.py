"""Shared cases of the tests/unit/test_planning_*.py files (no tests of its own): hand-made
topologies and trees, random partial meshes, the built-in topologies."""
import networkx as nx
import numpy as np

from netstorm.geoserver.policy.tree import Tree
from netstorm.scheduler.topology import Link, Topology
from netstorm.wan import load_topology

B = 46758048                 # resnet18, float32
MIB = 1 << 20


def topo(dcs, *links, name="t"):
    """links: (a, b, mbps) or (a, b, mbps_ab, mbps_ba)."""
    return Topology(name, tuple(dcs), tuple(Link(l[0], l[1], l[2], l[-1]) for l in links))


def tree(root, **parent):
    return Tree(root=root, parent={dc: (None if dc == root else p) for dc, p in
                                   {**parent, root: None}.items()})


def random_partial_mesh(seed: int) -> Topology:
    """A connected networkx G(n, p) graph (components chained together), 4..10 DCs, each
    direction's rate uniform in [10, 150) Mbit/s."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 11))
    g = nx.gnp_random_graph(n, float(rng.uniform(0.25, 0.7)), seed=seed)
    parts = [sorted(c) for c in nx.connected_components(g)]
    for a, b in zip(parts, parts[1:]):
        g.add_edge(a[0], b[-1])
    dcs = tuple(f"dc{i}" for i in range(n))
    return Topology(f"random{seed}", dcs, tuple(
        Link(dcs[a], dcs[b], round(float(rng.uniform(10, 150)), 1),
             round(float(rng.uniform(10, 150)), 1)) for a, b in sorted(g.edges())))


RANDOM = [random_partial_mesh(seed) for seed in range(24)]
BUILTIN = {name: load_topology(name).without_latency()    # bandwidth alone; latency: its own tests
           for name in ("small", "hetero6", "paper9")}
