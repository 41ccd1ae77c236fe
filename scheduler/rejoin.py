"""Workers and servers that died and may come back: which are awaited, until when, and
whether a REGISTER is one of them coming back (a worker into its rank, a server into its
DC; docs/recovery.md).

Pure logic, no sockets: the scheduler's loop asks :meth:`LostNodes.lose` when a node falls
silent or fails, :meth:`LostNodes.overdue` every beat, and :meth:`LostNodes.rejoin` for a
REGISTER received while running.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from netstorm.geoserver.core.nodes import SERVER, WORKER, NodeInfo

__all__ = ["Lost", "LostNodes"]


@dataclass(frozen=True)
class Lost:
    node: NodeInfo
    deadline: float
    why: str


class LostNodes:
    def __init__(self, restarts: int, timeout_s: float, server_restarts: int = 0):
        """``restarts``: how often each worker may come back (0: never, a death aborts);
        ``server_restarts``: the same for each DC's server; ``timeout_s``: how long the
        cluster waits for one."""
        self.restarts, self.timeout_s = restarts, timeout_s
        self.budget = {WORKER: restarts, SERVER: server_restarts}
        self.lost: dict = {}            # node id -> Lost
        self.used: Counter = Counter()  # node id -> restarts so far

    def __contains__(self, node_id) -> bool:
        return node_id in self.lost

    def lose(self, node: NodeInfo, now: float, why: str) -> bool:
        """Await ``node`` (dead: ``why``) if it is a worker or server with restarts left;
        False when the cluster must abort instead. O(1)."""
        if self.used[node.id] >= self.budget.get(node.role, 0):
            return False
        self.used[node.id] += 1
        self.lost[node.id] = Lost(node, now + self.timeout_s, why)
        return True

    def revive(self, node_id: int) -> Lost:
        """``node_id`` spoke again: no longer awaited, and its restart given back. O(1)."""
        self.used[node_id] -= 1
        return self.lost.pop(node_id)

    def overdue(self, now: float) -> list:
        """The awaited workers whose time is up. O(lost)."""
        return [lost for lost in self.lost.values() if now > lost.deadline]

    def rejoin(self, meta: dict) -> tuple:
        """``(node, "")``: the awaited worker a REGISTER's ``meta`` comes back as, at its new
        address (same id, rank and local rank); ``(None, why not)`` otherwise. O(lost)."""
        role, dc, index = meta.get("role"), meta.get("dc"), meta.get("local_index")
        if role not in self.budget:
            return None, f"the cluster is running; a {role} cannot join it now"
        local = meta.get("local_address", "")
        if not isinstance(meta.get("address"), str) or not isinstance(local, str) or \
                local and not local.startswith("ipc://"):
            return None, "registration carries no valid address"
        for node_id, lost in self.lost.items():
            if lost.node.role == role and lost.node.dc == dc and \
                    (role == SERVER or lost.node.local_rank == index):
                del self.lost[node_id]
                return replace(lost.node, address=meta["address"],
                               host=str(meta.get("host", "")), local_address=local), ""
        waiting = ", ".join(l.node.describe() for l in self.lost.values())
        what = f"server of {dc}" if role == SERVER else f"worker {dc}/{index}"
        return None, (f"the cluster is running and no {what} is awaited "
                      f"(awaited: {waiting or 'none'})")

    def remaining(self, node_id: int, role: str = WORKER) -> int:
        return self.budget.get(role, 0) - self.used[node_id]
