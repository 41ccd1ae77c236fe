"""The WAN as the scheduler plans on it: DCs, the links joining them, each direction's rate.

:class:`Topology` is validated on construction; the scheduler builds one from the cluster
file's links or from a measurement. Pure: no processes, no network, no files (the topology
file format and the built-in topologies belong to the emulated WAN, ``netstorm.wan``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

MAX_CUT_DCS = 22

Rates = dict  # {(a, b): mbps} for directed DC pairs


class TopologyError(ValueError):
    """A topology (file) is unusable; the message names the file and the problem."""


@dataclass(frozen=True)
class Link:
    """An undirected physical link between DCs ``a`` and ``b`` with a rate per direction."""
    a: str
    b: str
    mbps_ab: float
    mbps_ba: float

    def rate(self, src: str, dst: str) -> float:
        """The rate from ``src`` to ``dst`` (which must be this link's two ends)."""
        if (src, dst) == (self.a, self.b):
            return self.mbps_ab
        if (src, dst) == (self.b, self.a):
            return self.mbps_ba
        raise KeyError(f"link {self.a}-{self.b} does not join {src} -> {dst}")


def is_rate(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(name, dcs, links, where: str) -> None:
    """Every structural rule of a topology; raises :class:`TopologyError` naming ``where``."""
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{where}: name must be a non-empty string, got {name!r}")
    if len(dcs) < 2:
        raise TopologyError(f"{where}: a topology needs at least 2 DCs, got {len(dcs)}")
    seen = set()
    for dc in dcs:
        if not isinstance(dc, str) or not dc or \
                not dc.replace("-", "").replace("_", "").isalnum() or not dc.isascii():
            raise TopologyError(f"{where}: DC name {dc!r} must be ASCII letters, digits, - or _")
        if dc in seen:
            raise TopologyError(f"{where}: duplicate DC {dc!r}")
        seen.add(dc)
    pairs = set()
    for i, link in enumerate(links):
        at = f"{where} link #{i + 1} ({link.a}-{link.b})"
        for end in (link.a, link.b):
            if end not in seen:
                raise TopologyError(f"{at}: unknown DC {end!r}; DCs are {list(dcs)}")
        if link.a == link.b:
            raise TopologyError(f"{at}: self-loop: a link must join two different DCs")
        pair = frozenset((link.a, link.b))
        if pair in pairs:
            raise TopologyError(f"{at}: duplicate link between {link.a} and {link.b}")
        pairs.add(pair)
        for key in ("mbps_ab", "mbps_ba"):
            value = getattr(link, key)
            if not is_rate(value) or not math.isfinite(value):
                raise TopologyError(f"{at}: {key} must be a finite number, got {value!r}")
            if value <= 0:
                raise TopologyError(f"{at}: {key} must be > 0 Mbit/s, got {value!r}")
    graph = nx.Graph()
    graph.add_nodes_from(dcs)
    graph.add_edges_from((link.a, link.b) for link in links)
    if not nx.is_connected(graph):
        parts = sorted((sorted(c) for c in nx.connected_components(graph)), key=lambda c: c[0])
        raise TopologyError(f"{where}: disconnected: the DCs fall into {len(parts)} groups "
                            f"with no link between them: {parts}")


@dataclass(frozen=True)
class Topology:
    """DCs and the physical links between them; validated on construction.

    ``source`` (the file it came from) only makes error messages precise.
    """
    name: str
    dcs: tuple
    links: tuple
    source: str = field(default="<built>", compare=False)

    def __post_init__(self):
        object.__setattr__(self, "dcs", tuple(self.dcs))
        object.__setattr__(self, "links", tuple(self.links))
        _check(self.name, self.dcs, self.links, self.source)

    def graph(self) -> nx.DiGraph:
        """Both directions of every link as edges with attribute ``mbps``. O(V + E)."""
        graph = nx.DiGraph()
        graph.add_nodes_from(self.dcs)
        for link in self.links:
            graph.add_edge(link.a, link.b, mbps=link.mbps_ab)
            graph.add_edge(link.b, link.a, mbps=link.mbps_ba)
        return graph

    @property
    def is_full_mesh(self) -> bool:
        """Whether every pair of DCs has a direct link. O(1) (links are validated unique)."""
        n = len(self.dcs)
        return len(self.links) == n * (n - 1) // 2

    def link(self, a: str, b: str):
        """The link joining ``a`` and ``b`` (either order), or None. O(E)."""
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        return None

    def rate(self, a: str, b: str) -> float:
        """The direct link's rate from ``a`` to ``b`` in Mbit/s, 0.0 without a link. O(E)."""
        self._known(a)
        self._known(b)
        link = self.link(a, b)
        return 0.0 if link is None or a == b else link.rate(a, b)

    def neighbors(self, dc: str) -> tuple:
        """DCs with a direct link to ``dc``, in the order of :attr:`dcs`. O(V + E)."""
        self._known(dc)
        near = {link.b if link.a == dc else link.a for link in self.links if dc in (link.a, link.b)}
        return tuple(d for d in self.dcs if d in near)

    def scaled(self, factor: float) -> "Topology":
        """Every rate multiplied by ``factor`` (> 0). O(E)."""
        if not is_rate(factor) or not factor > 0 or not math.isfinite(factor):
            raise TopologyError(f"{self.source}: scale factor must be > 0, got {factor!r}")
        return Topology(self.name, self.dcs,
                        tuple(Link(l.a, l.b, l.mbps_ab * factor, l.mbps_ba * factor)
                              for l in self.links), source=self.source)

    def with_rates(self, rates: Rates) -> "Topology":
        """A copy where each directed pair in ``rates`` gets that rate (others unchanged). O(E)."""
        for (a, b) in rates:
            if self.link(a, b) is None:
                raise TopologyError(f"{self.source}: no link {a}-{b} to set a rate on")
        return Topology(self.name, self.dcs,
                        tuple(Link(l.a, l.b, rates.get((l.a, l.b), l.mbps_ab),
                                   rates.get((l.b, l.a), l.mbps_ba)) for l in self.links),
                        source=self.source)

    def rates(self) -> Rates:
        """Every direction's rate as ``{(a, b): mbps}``. O(E)."""
        out = {}
        for l in self.links:
            out[(l.a, l.b)] = l.mbps_ab
            out[(l.b, l.a)] = l.mbps_ba
        return out

    def _known(self, dc: str) -> None:
        if dc not in self.dcs:
            raise TopologyError(f"{self.source}: no DC named {dc!r}; DCs are {list(self.dcs)}")



def cut_lower_bound(topology: Topology, model_bytes: float):
    """Lower bound on the time of one all-reduce of ``model_bytes`` over the WAN.

    For a cut (S, V\\S), each side must receive the other side's contribution, so at least
    ``model_bytes`` crosses the cut in each direction; with cap(S->rest) the summed Mbit/s of
    links from S to the rest, the cut needs ``model_bytes * 8 / (1e6 * min(cap(S->rest),
    cap(rest->S)))`` seconds. The bound is the maximum over every cut. Returns
    ``(seconds, S)`` where S is the bottleneck cut's smaller side (ties: the side with
    ``dcs[0]``); between equal cuts the first in enumeration order wins (capacities are
    compared rounded to 1e-6 Mbit/s so float noise cannot reorder them).

    Exact enumeration of the 2^(V-1) - 1 cuts, each O(V^2) numpy work in blocks:
    O(2^V * V^2) time, O(V^2 + block) memory; refuses more than 22 DCs (about 0.1 s at 20
    DCs, 0.5 s at 22).
    """
    n = len(topology.dcs)
    if n > MAX_CUT_DCS:
        raise TopologyError(f"{topology.source}: exact cut enumeration is limited to "
                            f"{MAX_CUT_DCS} DCs (2^(n-1) cuts); this topology has {n}")
    if not model_bytes > 0:
        raise TopologyError(f"model_bytes must be > 0, got {model_bytes!r}")
    index = {dc: i for i, dc in enumerate(topology.dcs)}
    rate = np.zeros((n, n))
    for link in topology.links:
        rate[index[link.a], index[link.b]] = link.mbps_ab
        rate[index[link.b], index[link.a]] = link.mbps_ba
    out_sum, in_sum = rate.sum(axis=1), rate.sum(axis=0)
    bits = np.arange(n, dtype=np.int64)
    best_cap, best_mask = math.inf, 0
    total = 1 << (n - 1)                  # masks with bit 0 (dcs[0]) set, except all-of-V
    block = 1 << 15
    for start in range(0, total, block):
        low = np.arange(start, min(start + block, total), dtype=np.int64)
        masks = (low << 1) | 1
        member = ((masks[:, None] >> bits) & 1).astype(float)         # block x n
        inner = ((member @ rate) * member).sum(axis=1)                # within S
        out_cap, in_cap = member @ out_sum - inner, member @ in_sum - inner
        cap = np.round(np.minimum(out_cap, in_cap), 6)
        cap[masks == (1 << n) - 1] = math.inf                         # S = V is no cut
        pos = int(np.argmin(cap))
        if cap[pos] < best_cap:
            best_cap, best_mask = float(cap[pos]), int(masks[pos])
    side = frozenset(dc for dc, i in index.items() if best_mask >> i & 1)
    if len(side) * 2 > n:
        side = frozenset(topology.dcs) - side
    out_exact = sum(l.rate(a, b) for l in topology.links for a, b in ((l.a, l.b), (l.b, l.a))
                    if a in side and b not in side)
    in_exact = sum(l.rate(a, b) for l in topology.links for a, b in ((l.a, l.b), (l.b, l.a))
                   if b in side and a not in side)
    return model_bytes * 8 / (1e6 * min(out_exact, in_exact)), side


def cut_lower_bound_s(topology: Topology, model_bytes: float) -> float:
    """The seconds of :func:`cut_lower_bound` alone."""
    return cut_lower_bound(topology, model_bytes)[0]
