"""A WAN link as data: :class:`Link`, the one type for a link between two DCs, used by the
cluster file's ``[[link]]`` tables (``config.cluster``), by the scheduler's
:class:`~netstorm.scheduler.topology.Topology` and by the emulated WAN's topologies.

Pure: a frozen dataclass; it checks nothing itself (the cluster file and the topology
validate the links they are given, each naming its source)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Link"]


@dataclass(frozen=True)
class Link:
    """An undirected physical link between DCs ``a`` and ``b`` with a rate per direction and
    a one-way propagation delay (the same both ways; 0: unknown or negligible)."""
    a: str
    b: str
    mbps_ab: float
    mbps_ba: float
    latency_ms: float = 0.0

    def rate(self, src: str, dst: str) -> float:
        """The rate from ``src`` to ``dst`` (which must be this link's two ends). O(1)."""
        if (src, dst) == (self.a, self.b):
            return self.mbps_ab
        if (src, dst) == (self.b, self.a):
            return self.mbps_ba
        raise KeyError(f"link {self.a}-{self.b} does not join {src} -> {dst}")
