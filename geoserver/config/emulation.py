"""Emulated propagation delay: the cluster file's ``[emulation]`` table, written only by the
emulated WAN (``bench.py --latency``), never for a real one.

The machines this is developed on have no ``netem``: tc can shape a link's rate but cannot
delay its packets. So the delay is added where the bytes are delivered: every process of an
emulated cluster holds each message it receives from another DC for that pair's one-way
delay before handing it on (:class:`~netstorm.geoserver.core.delay_line.DelayLine` in the
:class:`~netstorm.geoserver.core.van.Van`). The sending DC is read off the connection's source
address, which the emulator gives one per DC (never off the message). The rate limit has
already been paid by then (tc shaped the link), so a message arrives after its transmission
plus the delay, as on a real link; what is not emulated is TCP's slower window growth over a
long round trip. Stock MXNet's ps-lite does not go through this transport, so it cannot be
delayed here: the benchmark refuses to run it with delays on (docs/benchmarks.md).

File format::

    [emulation]
    delay_ms = [["dc1", "dc2", 84.0], ["dc2", "dc1", 84.0]]   # [from, to, one-way ms]
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .settings import MAX_LATENCY_MS

__all__ = ["EmulationConfig", "parse_emulation", "receive_delays"]


@dataclass(frozen=True)
class EmulationConfig:
    """``delays``: ``((from_dc, to_dc, one-way ms), ...)``, every ordered pair at most once."""
    delays: tuple = ()

    @property
    def on(self) -> bool:
        return bool(self.delays)

    def to_params(self) -> dict:
        return {"delay_ms": [[a, b, float(ms)] for a, b, ms in self.delays]}


def parse_emulation(raw, dcs: set, where: str, error: type) -> EmulationConfig:
    """Validate an ``[emulation]`` table; problems raise ``error`` naming ``where``. O(pairs)."""
    if not isinstance(raw, dict):
        raise error(f"{where} must be a table")
    unknown = sorted(set(raw) - {"delay_ms"})
    if unknown:
        raise error(f"{where}: unknown field {unknown[0]!r}; expected delay_ms")
    value = raw.get("delay_ms", [])
    if not isinstance(value, list):
        raise error(f"{where}: delay_ms must be a list of [from, to, ms], got {value!r}")
    delays, seen = [], set()
    for i, item in enumerate(value):
        at = f"{where} delay_ms[{i}]"
        if not isinstance(item, list) or len(item) != 3:
            raise error(f"{at} must be [from, to, ms], got {item!r}")
        a, b, ms = item
        for end in (a, b):
            if not isinstance(end, str) or end not in dcs:
                raise error(f"{at}: unknown DC {end!r}")
        if a == b or (a, b) in seen:
            raise error(f"{at}: {a} -> {b} is a self-pair or given twice")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) \
                or not 0 <= ms <= MAX_LATENCY_MS:
            raise error(f"{at}: ms must be a number in [0, {MAX_LATENCY_MS:g}], got {ms!r}")
        seen.add((a, b))
        delays.append((a, b, float(ms)))
    return EmulationConfig(tuple(delays))


def receive_delays(emulation: EmulationConfig, host_of: dict, own_host: str,
                   error: type) -> dict:
    """``{source address: seconds}`` a process bound at ``own_host`` holds messages from each
    other DC's address for; ``host_of``: DC -> the address its processes use (one per DC,
    as the emulator gives them). {} without delays, or for a process at no DC's address.
    O(DCs + pairs)."""
    if not emulation.on:
        return {}
    hosts = list(host_of.values())
    if len(set(hosts)) != len(hosts):
        raise error("[emulation] delays need one address per DC (the sender is known by its "
                    "address), but DCs share one")
    own = [dc for dc, host in host_of.items() if host == own_host]
    if not own:
        return {}
    return {host_of[a]: ms / 1e3 for a, b, ms in emulation.delays
            if b == own[0] and ms > 0}
