"""Workers that died and may come back: which are awaited, until when, and whether a
REGISTER is one of them coming back into its rank (docs/recovery.md).

Pure logic, no sockets: the scheduler's loop asks :meth:`LostWorkers.lose` when a worker
falls silent or fails, :meth:`LostWorkers.overdue` every beat, and
:meth:`LostWorkers.rejoin` for a REGISTER received while running.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from netstorm.geoserver.nodes import WORKER, NodeInfo


@dataclass(frozen=True)
class Lost:
    node: NodeInfo
    deadline: float
    why: str


class LostWorkers:
    def __init__(self, restarts: int, timeout_s: float):
        """``restarts``: how often each worker may come back (0: never, a death aborts);
        ``timeout_s``: how long the cluster waits for one."""
        self.restarts, self.timeout_s = restarts, timeout_s
        self.lost: dict = {}            # node id -> Lost
        self.used: Counter = Counter()  # node id -> restarts so far

    def __contains__(self, node_id) -> bool:
        return node_id in self.lost

    def lose(self, node: NodeInfo, now: float, why: str) -> bool:
        """Await ``node`` (dead: ``why``) if it is a worker with restarts left; False when
        the cluster must abort instead. O(1)."""
        if node.role != WORKER or self.used[node.id] >= self.restarts:
            return False
        self.used[node.id] += 1
        self.lost[node.id] = Lost(node, now + self.timeout_s, why)
        return True

    def overdue(self, now: float) -> list:
        """The awaited workers whose time is up. O(lost)."""
        return [lost for lost in self.lost.values() if now > lost.deadline]

    def rejoin(self, meta: dict) -> tuple:
        """``(node, "")``: the awaited worker a REGISTER's ``meta`` comes back as, at its new
        address (same id, rank and local rank); ``(None, why not)`` otherwise. O(lost)."""
        role, dc, index = meta.get("role"), meta.get("dc"), meta.get("local_index")
        if role != WORKER:
            return None, f"the cluster is running; a {role} cannot join it now"
        local = meta.get("local_address", "")
        if not isinstance(meta.get("address"), str) or not isinstance(local, str) or \
                local and not local.startswith("ipc://"):
            return None, "registration carries no valid address"
        for node_id, lost in self.lost.items():
            if lost.node.dc == dc and lost.node.local_rank == index:
                del self.lost[node_id]
                return replace(lost.node, address=meta["address"],
                               host=str(meta.get("host", "")), local_address=local), ""
        waiting = ", ".join(f"{l.node.dc}/{l.node.local_rank}" for l in self.lost.values())
        return None, (f"the cluster is running and no worker {dc}/{index} is awaited "
                      f"(awaited: {waiting or 'none'})")

    def remaining(self, node_id: int) -> int:
        return self.restarts - self.used[node_id]
