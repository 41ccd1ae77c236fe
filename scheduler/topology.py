"""WAN topologies: which DCs exist, which physical links join them, and each link's rate.

A topology file is TOML::

    name = "small"
    dcs = ["dc0", "dc1", "dc2"]

    [[link]]
    a = "dc0"
    b = "dc1"
    mbps = 40            # the same rate both ways (Mbit/s), or
    # mbps_ab = 40       # a -> b
    # mbps_ba = 20       # b -> a

Built-in topologies (``small``, ``hetero6``, ``paper9``) are generated deterministically by
:func:`small_topology`, :func:`hetero6_topology` and :func:`paper9_topology` and shipped as
files in ``scripts/topologies/``; :func:`load_topology` reads those files (a test checks that
they equal the generators' output).

Everything here is pure: no processes, no network, no root needed. ``scripts/wan.py`` turns
a :class:`Topology` into an emulated WAN of network namespaces.
"""
from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np

TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "scripts" / "topologies"
BUILTINS = ("small", "hetero6", "paper9")
HETERO6_SEED = 6
PAPER9_SEED = 9
PAPER9_FLUCTUATING_SEED = 180
PAPER9_EDGES = ((1, 2), (1, 3), (2, 3), (2, 5), (3, 4), (4, 5), (4, 6), (5, 7), (6, 7),
                (6, 8), (6, 9), (7, 8), (8, 9))
MAX_CUT_DCS = 22

Rates = dict  # {(a, b): mbps} for directed DC pairs
Trace = list  # [(t_s, Rates)], sorted by t_s


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


def _is_rate(value) -> bool:
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
            if not _is_rate(value) or not math.isfinite(value):
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
        if not _is_rate(factor) or not factor > 0 or not math.isfinite(factor):
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


# --- files -----------------------------------------------------------------------------------

_LINK_KEYS = {"a", "b", "mbps", "mbps_ab", "mbps_ba"}


def _rate_field(raw: dict, key: str, where: str) -> float:
    if key not in raw:
        raise TopologyError(f"{where}: missing field {key!r}")
    value = raw[key]
    if not _is_rate(value):
        raise TopologyError(f"{where}: {key} must be a number (Mbit/s), got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise TopologyError(f"{where}: {key} must be > 0 Mbit/s, got {value!r}")
    return float(value)


def parse_topology(data: dict, source: str = "<dict>") -> Topology:
    """Validate a parsed topology table; every problem names ``source`` and the field. O(V + E)."""
    for key in ("name", "dcs"):
        if key not in data:
            raise TopologyError(f"{source}: missing field {key!r}")
    unknown = set(data) - {"name", "dcs", "link"}
    if unknown:
        raise TopologyError(f"{source}: unknown field(s) {sorted(unknown)}; "
                            f"expected name, dcs and [[link]] tables")
    name, dcs = data["name"], data["dcs"]
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{source}: name must be a non-empty string, got {name!r}")
    if not isinstance(dcs, list) or not all(isinstance(d, str) for d in dcs):
        raise TopologyError(f"{source}: dcs must be a list of DC names, got {dcs!r}")
    if len(dcs) < 2:
        raise TopologyError(f"{source}: a topology needs at least 2 DCs, got {len(dcs)}")
    raw_links = data.get("link")
    if raw_links is None:
        raise TopologyError(f"{source}: missing [[link]] tables; the DCs must be connected")
    if not isinstance(raw_links, list) or not all(isinstance(r, dict) for r in raw_links):
        raise TopologyError(f"{source}: 'link' must be [[link]] tables")
    links = []
    for i, raw in enumerate(raw_links):
        where = f"{source} link #{i + 1}"
        unknown = set(raw) - _LINK_KEYS
        if unknown:
            raise TopologyError(f"{where}: unknown field(s) {sorted(unknown)}; "
                                f"expected a, b and mbps (or mbps_ab and mbps_ba)")
        for key in ("a", "b"):
            if key not in raw:
                raise TopologyError(f"{where}: missing field {key!r}")
            if not isinstance(raw[key], str):
                raise TopologyError(f"{where}: {key} must be a DC name, got {raw[key]!r}")
        where = f"{source} link #{i + 1} ({raw['a']}-{raw['b']})"
        if "mbps" in raw:
            if "mbps_ab" in raw or "mbps_ba" in raw:
                raise TopologyError(f"{where}: give either mbps or mbps_ab and mbps_ba, not both")
            ab = ba = _rate_field(raw, "mbps", where)
        elif "mbps_ab" in raw or "mbps_ba" in raw:
            ab, ba = _rate_field(raw, "mbps_ab", where), _rate_field(raw, "mbps_ba", where)
        else:
            raise TopologyError(f"{where}: missing field 'mbps' (or 'mbps_ab' and 'mbps_ba')")
        links.append(Link(raw["a"], raw["b"], ab, ba))
    return Topology(name, tuple(dcs), tuple(links), source=source)


def topology_path(name: str) -> Path:
    """Where the built-in topology ``name`` is shipped."""
    return TOPOLOGY_DIR / f"{name}.toml"


def load_topology(path_or_name) -> Topology:
    """Read a topology file, or a built-in one by name (``small``, ``hetero6``, ``paper9``)."""
    if isinstance(path_or_name, str) and path_or_name in BUILTINS:
        path = topology_path(path_or_name)
    else:
        path = Path(path_or_name)
    try:
        text = path.read_text()
    except OSError as exc:
        hint = "" if str(path_or_name).endswith(".toml") else \
            f" (built-in topologies: {', '.join(BUILTINS)})"
        raise TopologyError(f"cannot read topology file {path}: {exc.strerror}{hint}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TopologyError(f"{path}: not valid TOML: {exc}") from exc
    return parse_topology(data, source=str(path))


def to_toml(topology: Topology, header: str = "") -> str:
    """Render ``topology`` as a file that :func:`load_topology` reads back equal. O(V + E)."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += [f'name = "{topology.name}"',
              "dcs = [" + ", ".join(f'"{d}"' for d in topology.dcs) + "]"]
    for link in topology.links:
        lines += ["", "[[link]]", f'a = "{link.a}"', f'b = "{link.b}"']
        if link.mbps_ab == link.mbps_ba:
            lines.append(f"mbps = {float(link.mbps_ab)!r}")
        else:
            lines += [f"mbps_ab = {float(link.mbps_ab)!r}", f"mbps_ba = {float(link.mbps_ba)!r}"]
    return "\n".join(lines) + "\n"


# --- built-ins -------------------------------------------------------------------------------

def full_mesh(name: str, dcs, mbps: float) -> Topology:
    """Every pair of ``dcs`` linked at ``mbps`` both ways. O(V^2)."""
    dcs = tuple(dcs)
    return Topology(name, dcs, tuple(Link(a, b, float(mbps), float(mbps))
                                     for a, b in itertools.combinations(dcs, 2)))


def small_topology() -> Topology:
    """3 DCs dc0..dc2, full mesh, 40 Mbit/s each way."""
    return full_mesh("small", ("dc0", "dc1", "dc2"), 40.0)


def hetero6_topology(seed: int = HETERO6_SEED) -> Topology:
    """6 DCs dc0..dc5, full mesh; each direction of each link independently uniform in
    [10, 100) Mbit/s from ``numpy.random.default_rng(seed)``, rounded to 0.1."""
    dcs = tuple(f"dc{i}" for i in range(6))
    pairs = list(itertools.combinations(dcs, 2))
    draws = np.random.default_rng(seed).uniform(10.0, 100.0, size=(len(pairs), 2))
    return Topology("hetero6", dcs, tuple(Link(a, b, round(float(ab), 1), round(float(ba), 1))
                                          for (a, b), (ab, ba) in zip(pairs, draws)))


def paper9_topology(seed: int = PAPER9_SEED) -> Topology:
    """NetStorm paper's 9-DC partial mesh dc1..dc9 with 13 links (:data:`PAPER9_EDGES`).

    Each link has the same rate both ways, uniform in [20, 155) Mbit/s from
    ``numpy.random.default_rng(seed)``, rounded to 0.1.
    """
    draws = np.random.default_rng(seed).uniform(20.0, 155.0, size=len(PAPER9_EDGES))
    return Topology("paper9", tuple(f"dc{i}" for i in range(1, 10)),
                    tuple(Link(f"dc{a}", f"dc{b}", round(float(r), 1), round(float(r), 1))
                          for (a, b), r in zip(PAPER9_EDGES, draws)))


GENERATORS = {"small": small_topology, "hetero6": hetero6_topology, "paper9": paper9_topology}


def builtin_file_text(name: str) -> str:
    """The exact text shipped as ``scripts/topologies/<name>.toml``."""
    topology = GENERATORS[name]()
    doc = (GENERATORS[name].__doc__ or "").strip().splitlines()
    seed = {"hetero6": HETERO6_SEED, "paper9": PAPER9_SEED}.get(name)
    header = "\n".join([f"Built-in topology {name!r}, generated by "
                        f"scheduler.topology.{GENERATORS[name].__name__}()"
                        + (f" with seed {seed}" if seed is not None else "") + " - do not edit;",
                        "regenerate with scheduler.topology.write_builtin_files().", ""]
                       + [line.strip() for line in doc])
    return to_toml(topology, header=header)


def write_builtin_files(directory=TOPOLOGY_DIR) -> list:
    """(Re)write every built-in topology file; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in BUILTINS:
        path = directory / f"{name}.toml"
        path.write_text(builtin_file_text(name))
        paths.append(path)
    return paths


# --- traces ----------------------------------------------------------------------------------

def fluctuating_trace(topology: Topology, period_s: float, duration_s: float, low: float,
                      high: float, seed: int, symmetric: bool = False) -> Trace:
    """Every ``period_s`` (from t = 0 while t < ``duration_s``) every link gets a new rate.

    Rates are uniform in [low, high) Mbit/s from ``numpy.random.default_rng(seed)``, rounded
    to 0.1; each direction is drawn independently unless ``symmetric``. Returns
    ``[(t_s, {(a, b): mbps_ab, (b, a): mbps_ba, ...}), ...]`` sorted by time.
    O(duration_s / period_s * E).
    """
    if not period_s > 0 or not duration_s > 0:
        raise TopologyError(f"trace needs period_s > 0 and duration_s > 0, "
                            f"got {period_s!r} and {duration_s!r}")
    if not 0 < low <= high:
        raise TopologyError(f"trace needs 0 < low <= high, got low={low!r} high={high!r}")
    rng = np.random.default_rng(seed)
    steps = math.ceil(duration_s / period_s - 1e-9)
    trace = []
    for step in range(steps):
        draws = rng.uniform(low, high, size=(len(topology.links), 2))
        rates = {}
        for link, (ab, ba) in zip(topology.links, draws):
            rates[(link.a, link.b)] = round(float(ab), 1)
            rates[(link.b, link.a)] = round(float(ab if symmetric else ba), 1)
        trace.append((step * period_s, rates))
    return trace


TRACES = ("paper9-fluctuating",)


def load_trace(name: str, period_s: float = 180.0, duration_s: float = 3600.0,
               seed: int = PAPER9_FLUCTUATING_SEED) -> Trace:
    """A named dynamic trace.

    ``paper9-fluctuating``: :func:`paper9_topology`'s links, each with a new rate (the same
    both ways, as in ``paper9``) uniform in [20, 155) Mbit/s every ``period_s`` (the paper
    used 180 s, the default here too; shorter periods make a harder test of re-planning).
    """
    if name == "paper9-fluctuating":
        return fluctuating_trace(load_topology("paper9"), period_s, duration_s, 20.0, 155.0,
                                 seed, symmetric=True)
    raise TopologyError(f"unknown trace {name!r}; known: {', '.join(TRACES)}")


def rates_at(trace: Trace, t_s: float, base: Rates = None) -> Rates:
    """The rates in effect at time ``t_s``: ``base`` updated by every change at or before it.
    O(len(trace) * E)."""
    current = dict(base or {})
    for t, rates in sorted(trace, key=lambda item: item[0]):
        if t > t_s:
            break
        current.update(rates)
    return current


def mean_rates(trace: Trace, duration_s: float, topology: Topology = None) -> Topology:
    """The time-weighted mean of every direction's rate over [0, ``duration_s``).

    A rate set at ``t`` holds until that direction's next change (changes at or after
    ``duration_s`` are ignored). With ``topology``, its rates hold until a direction's first
    change and the result keeps its name, DC and link order; without it, every direction
    must be set at t = 0 and DCs and links are taken in order of first appearance.
    O(len(trace) * E).
    """
    if not duration_s > 0:
        raise TopologyError(f"mean_rates needs duration_s > 0, got {duration_s!r}")
    changes = sorted(trace, key=lambda item: item[0])
    if topology is None:
        if not changes or changes[0][0] != 0:
            raise TopologyError("mean_rates: the trace does not start at t = 0; pass the "
                                "topology whose rates hold before the first change")
        current, dcs, pairs = {}, [], []
        for _, rates in changes:
            for a, b in rates:
                for dc in (a, b):
                    if dc not in dcs:
                        dcs.append(dc)
                if (b, a) not in pairs and (a, b) not in pairs:
                    pairs.append((a, b))
        missing = [p for pair in pairs for p in (pair, pair[::-1]) if p not in changes[0][1]]
        if missing:
            raise TopologyError(f"mean_rates: directions {missing} are not set at t = 0; "
                                f"pass the topology whose rates hold before")
        name = "mean"
    else:
        current = topology.rates()
        dcs, pairs, name = list(topology.dcs), [(l.a, l.b) for l in topology.links], topology.name
        for _, rates in changes:
            for direction in rates:
                if direction not in current:
                    raise TopologyError(f"{topology.source}: the trace sets {direction[0]} -> "
                                        f"{direction[1]}, which is not a link")
    area = {direction: 0.0 for direction in current} if topology else {}
    last_t = 0.0
    for t, rates in changes:
        if t >= duration_s:
            break
        for direction, mbps in current.items():
            area[direction] = area.get(direction, 0.0) + mbps * (t - last_t)
        current.update(rates)
        last_t = max(t, 0.0)
    for direction, mbps in current.items():
        area[direction] = area.get(direction, 0.0) + mbps * (duration_s - last_t)
    return Topology(name, tuple(dcs),
                    tuple(Link(a, b, area[(a, b)] / duration_s, area[(b, a)] / duration_s)
                          for a, b in pairs))


# --- routing and bounds ----------------------------------------------------------------------

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
