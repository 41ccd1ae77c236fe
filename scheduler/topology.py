"""The WAN as the scheduler plans on it: DCs, the links joining them, each direction's rate.

:class:`Topology` is validated on construction; the scheduler builds one from the cluster
file's links or from a measurement. Pure: no processes, no network, no files (the topology
file format and the built-in topologies belong to the emulated WAN, ``netstorm.wan``).
Its links are the cluster file's own :class:`~netstorm.geoserver.config.links.Link`
(re-exported here), so a declared WAN becomes a topology without conversion.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import networkx as nx

from netstorm.geoserver.config.links import Link
from netstorm.geoserver.config.settings import MAX_LATENCY_MS

__all__ = ["Link", "MAX_LATENCY_MS", "Rates", "Topology", "TopologyError", "is_rate"]

Rates = dict  # {(a, b): mbps} for directed DC pairs


class TopologyError(ValueError):
    """A topology (file) is unusable; the message names the file and the problem."""


def is_rate(value) -> bool:
    """Whether ``value`` is a number usable as a rate (int or float, not bool). O(1)."""
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
        if not is_rate(link.latency_ms) or not 0 <= link.latency_ms <= MAX_LATENCY_MS:
            raise TopologyError(f"{at}: latency_ms must be a number in [0, {MAX_LATENCY_MS}], "
                                f"got {link.latency_ms!r}")
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
        """Both directions of every link as edges with attributes ``mbps`` and ``latency_s``
        (one-way, seconds). O(V + E)."""
        graph = nx.DiGraph()
        graph.add_nodes_from(self.dcs)
        for link in self.links:
            graph.add_edge(link.a, link.b, mbps=link.mbps_ab, latency_s=link.latency_ms / 1e3)
            graph.add_edge(link.b, link.a, mbps=link.mbps_ba, latency_s=link.latency_ms / 1e3)
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
                        tuple(replace(l, mbps_ab=l.mbps_ab * factor, mbps_ba=l.mbps_ba * factor)
                              for l in self.links), source=self.source)

    def without_latency(self) -> "Topology":
        """A copy with every link's delay 0. O(E)."""
        return Topology(self.name, self.dcs, tuple(replace(l, latency_ms=0.0) for l in self.links),
                        source=self.source)

    def with_rates(self, rates: Rates) -> "Topology":
        """A copy where each directed pair in ``rates`` gets that rate (others unchanged). O(E)."""
        for (a, b) in rates:
            if self.link(a, b) is None:
                raise TopologyError(f"{self.source}: no link {a}-{b} to set a rate on")
        return Topology(self.name, self.dcs,
                        tuple(replace(l, mbps_ab=rates.get((l.a, l.b), l.mbps_ab),
                                      mbps_ba=rates.get((l.b, l.a), l.mbps_ba))
                              for l in self.links),
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
