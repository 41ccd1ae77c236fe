"""The cluster's nodes as the scheduler assigned them: roles, NodeInfo, NodeTable.

Pure data: every node gets the same table in its WELCOME; ids and ranks come from there,
never from arithmetic on well-known numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .failure_detector import FailureDetector

__all__ = ["NodeInfo", "NodeTable", "ROLES", "SCHEDULER", "SERVER", "SilenceJudge", "WORKER"]

SCHEDULER = "scheduler"
SERVER = "server"
WORKER = "worker"
ROLES = (SCHEDULER, SERVER, WORKER)



class SilenceJudge:
    """When a silent node is presumed dead: silent for longer than its deadline
    (:class:`~netstorm.geoserver.core.failure_detector.FailureDetector`: learnt from what
    was heard of it, ``dead_after_s`` at most; exactly ``dead_after_s`` with ``floor_s =
    0`` or while it was not heard regularly yet). A message that waits to be read may be
    its beat, queued while the loop that judges was busy (a long handler, the machine
    under load): it is read first, so a verdict is given only while nothing waits, i.e.
    the node is still silent when it is acted on. A flood of messages defers the judgment
    by ``dead_after_s`` at most. O(1) per judgment (amortized);
    one entry per node deferred."""

    def __init__(self, dead_after_s: float, heartbeat_s: float = 0.0, floor_s: float = 0.0):
        self.dead_after_s = dead_after_s
        self.detector = FailureDetector(dead_after_s, heartbeat_s, floor_s)
        self._deferred: dict = {}       # node -> when its judgment was first deferred
        self._suspected: dict = {}      # node -> when it was last heard, as suspected

    def heard(self, node, now: float) -> None:
        """Something of ``node`` arrived at ``now`` (it teaches the deadline)."""
        self.detector.heard(node, now)

    def deadline(self, node) -> float:
        return self.detector.deadline(node)

    def forget(self, node) -> None:
        self.detector.forget(node)
        self._deferred.pop(node, None)
        self._suspected.pop(node, None)

    def suspect(self, node, seen: float, now: float, bound: float) -> bool:
        """Whether ``node``, last heard at ``seen``, is newly suspected at ``now``: silent
        past its learnt deadline while its verdict waits for a later ``bound`` (a verdict
        that could not be undone: docs/recovery-detection.md). True once per silence. O(1)."""
        learnt = self.detector.deadline(node)
        if bound <= learnt or now - seen <= learnt or self._suspected.get(node) == seen:
            return False
        self._suspected[node] = seen
        return True

    def dead(self, node, silent_s: float, now: float, waiting: bool,
             deadline: float | None = None) -> bool:
        """Whether ``node``, silent for ``silent_s``, is presumed dead at ``now``;
        ``waiting``: a message waits to be read; ``deadline``: the silence allowed (None:
        the learnt one, :meth:`deadline`)."""
        if silent_s <= (self.detector.deadline(node) if deadline is None else deadline):
            self._deferred.pop(node, None)
            return False
        if not waiting:
            return True
        since = self._deferred.setdefault(node, now)
        return now - since > self.dead_after_s

@dataclass(frozen=True)
class NodeInfo:
    id: int
    role: str
    dc: str
    address: str
    rank: int = -1        # workers: global rank
    local_rank: int = -1  # workers: rank within the DC
    host: str = ""        # the machine's name: nodes of one DC on one host skip TCP
    local_address: str = ""     # ipc:// endpoint for them ("": none)

    def describe(self) -> str:
        if self.role == WORKER:
            return f"worker rank {self.rank} ({self.dc}/{self.local_rank}, node {self.id})"
        if self.role == SERVER:
            return f"server of {self.dc} (node {self.id})"
        return f"scheduler (node {self.id})"

    def moved_to(self, where: "NodeInfo") -> "NodeInfo":
        """This node (id, role, DC, ranks) reached where ``where`` says: a process that
        took its place (docs/recovery.md)."""
        return replace(self, address=where.address, host=where.host,
                       local_address=where.local_address)

    def to_json(self) -> dict:
        return {"id": self.id, "role": self.role, "dc": self.dc, "address": self.address,
                "rank": self.rank, "local_rank": self.local_rank, "host": self.host,
                "local_address": self.local_address}

    @classmethod
    def from_json(cls, data: dict) -> "NodeInfo":
        return cls(id=int(data["id"]), role=str(data["role"]), dc=str(data["dc"]),
                   address=str(data["address"]), rank=int(data["rank"]),
                   local_rank=int(data["local_rank"]), host=str(data.get("host", "")),
                   local_address=str(data.get("local_address", "")))


class NodeTable:
    """All nodes of a running cluster, as assigned by the scheduler."""

    def __init__(self, nodes):
        self.nodes = {n.id: n for n in nodes}
        self.dcs = list(dict.fromkeys(n.dc for n in nodes if n.role == SERVER))

    def __contains__(self, node_id) -> bool:
        return node_id in self.nodes

    def __getitem__(self, node_id) -> NodeInfo:
        return self.nodes[node_id]

    def describe(self, node_id) -> str:
        node = self.nodes.get(node_id)
        return node.describe() if node else f"unknown node {node_id}"

    def scheduler(self) -> NodeInfo:
        return next(n for n in self.nodes.values() if n.role == SCHEDULER)

    def server_of(self, dc: str) -> NodeInfo:
        for n in self.nodes.values():
            if n.role == SERVER and n.dc == dc:
                return n
        raise KeyError(f"no server for DC {dc!r}")

    def workers(self, dc: str | None = None) -> list:
        found = [n for n in self.nodes.values()
                 if n.role == WORKER and (dc is None or n.dc == dc)]
        return sorted(found, key=lambda n: n.rank)

    def to_json(self) -> list:
        return [n.to_json() for n in self.nodes.values()]

    @classmethod
    def from_json(cls, data) -> "NodeTable":
        return cls([NodeInfo.from_json(d) for d in data])
