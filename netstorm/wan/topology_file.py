"""The topology file format (TOML)::

    name = "small"
    dcs = ["dc0", "dc1", "dc2"]

    [[link]]
    a = "dc0"
    b = "dc1"
    mbps = 40            # the same rate both ways (Mbit/s), or
    # mbps_ab = 40       # a -> b
    # mbps_ba = 20       # b -> a
    latency_ms = 35      # optional: one-way delay (ms), the same both ways; default 0

:func:`parse_topology` validates a parsed table, :func:`read_topology_file` reads a file and
:func:`to_toml` writes one back. Pure: no processes, no network.
"""
from __future__ import annotations

import math

from netstorm.geoserver.config.cluster import read_toml
from netstorm.scheduler.topology import MAX_LATENCY_MS, Link, Topology, TopologyError, is_rate

__all__ = ["parse_topology", "read_topology_file", "to_toml"]

_LINK_KEYS = {"a", "b", "mbps", "mbps_ab", "mbps_ba", "latency_ms"}


def _rate_field(raw: dict, key: str, where: str) -> float:
    if key not in raw:
        raise TopologyError(f"{where}: missing field {key!r}")
    value = raw[key]
    if not is_rate(value):
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
                                f"expected a, b, mbps (or mbps_ab and mbps_ba) and "
                                f"optionally latency_ms")
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
        latency = raw.get("latency_ms", 0.0)
        if not is_rate(latency) or not 0 <= latency <= MAX_LATENCY_MS:
            raise TopologyError(f"{where}: latency_ms must be a number of milliseconds in "
                                f"[0, {MAX_LATENCY_MS:g}], got {latency!r}")
        links.append(Link(raw["a"], raw["b"], ab, ba, float(latency)))
    return Topology(name, tuple(dcs), tuple(links), source=source)


def read_topology_file(path, hint: str = "") -> Topology:
    """Read and validate the topology file ``path``; ``hint`` is added to a read error."""
    data = read_toml(path, TopologyError, "topology file", hint)
    return parse_topology(data, source=str(path))


def to_toml(topology: Topology, header: str = "") -> str:
    """Render ``topology`` as a file that :func:`read_topology_file` reads back equal. O(V + E)."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += [f'name = "{topology.name}"',
              "dcs = [" + ", ".join(f'"{d}"' for d in topology.dcs) + "]"]
    for link in topology.links:
        lines += ["", "[[link]]", f'a = "{link.a}"', f'b = "{link.b}"']
        if link.mbps_ab == link.mbps_ba:
            lines.append(f"mbps = {float(link.mbps_ab)!r}")
        else:
            lines += [f"mbps_ab = {float(link.mbps_ab)!r}", f"mbps_ba = {float(link.mbps_ba)!r}"]
        if link.latency_ms:
            lines.append(f"latency_ms = {float(link.latency_ms)!r}")
    return "\n".join(lines) + "\n"
