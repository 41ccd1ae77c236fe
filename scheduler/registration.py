"""Registration: the nodes a cluster expects, the check of each REGISTER, ids and ranks.

Pure logic, no sockets and no clock: the scheduler's loop (:mod:`netstorm.scheduler.service`)
feeds it the REGISTER metas it receives and sends what it answers.
"""
from __future__ import annotations

from netstorm.geoserver.core.nodes import SCHEDULER, SERVER, WORKER, NodeInfo, NodeTable

__all__ = ["Registration", "SCHEDULER_ID", "layout"]

SCHEDULER_ID = 0


class Registration:
    def __init__(self, dcs):
        """``dcs``: the cluster's :class:`~netstorm.geoserver.config.cluster.DataCenter` s,
        in file order (servers get their ids in that order, workers their ranks)."""
        self.dcs = tuple(dcs)
        self.expected: dict = {}        # (role, DC) -> how many nodes
        for dc in self.dcs:
            self.expected[(SERVER, dc.name)] = 1
            self.expected[(WORKER, dc.name)] = dc.workers
        self.registered: list = []      # accepted REGISTER metas, in arrival order

    def missing(self) -> list:
        """What has not registered yet, e.g. ``["1 server(s) of eu", "2 worker(s) of us"]``."""
        missing = []
        for (role, dc), count in self.expected.items():
            have = sum(1 for r in self.registered if (r["role"], r["dc"]) == (role, dc))
            if have < count:
                missing.append(f"{count - have} {role}(s) of {dc}")
        return missing

    @property
    def complete(self) -> bool:
        return not self.missing()

    def progress(self) -> str:
        """E.g. ``"5 of 6 nodes registered; missing: 1 worker(s) of dc2"``."""
        total = sum(self.expected.values())
        return (f"{len(self.registered)} of {total} nodes registered; missing: "
                f"{', '.join(self.missing()) or 'nothing'}")

    def check(self, meta: dict) -> str:
        """Why a REGISTER with ``meta`` cannot be accepted now ("" if it can)."""
        role, dc = meta.get("role"), meta.get("dc")
        if meta.get("report") is not None:
            return ("this scheduler is starting a new cluster: a node of a running one "
                    "(re-registering with its report) cannot join it")
        if role not in (SERVER, WORKER):
            return f"unknown role {role!r}"
        if not isinstance(dc, str) or (SERVER, dc) not in self.expected:
            return f"unknown DC {dc!r}; the cluster has {[d.name for d in self.dcs]}"
        if not isinstance(meta.get("address"), str):
            return "registration carries no address"
        local = meta.get("local_address", "")
        if local and not (isinstance(local, str) and local.startswith("ipc://")):
            return f"local_address {local!r} is not an ipc:// endpoint"
        same = [r for r in self.registered if (r["role"], r["dc"]) == (role, dc)]
        if len(same) >= self.expected[(role, dc)]:
            return f"{dc} already has all its {role}s registered"
        index = meta.get("local_index", -1)
        if not isinstance(index, int):
            return "local_index must be an integer"
        if index >= 0 and any(r.get("local_index") == index for r in same):
            return f"{dc} already has a {role} with local index {index}"
        return ""

    def add(self, meta: dict) -> str:
        """Accept a REGISTER unless :meth:`check` finds a problem, which it returns."""
        problem = self.check(meta)
        if not problem:
            self.registered.append({**meta, "local_index": meta.get("local_index", -1)})
        return problem

    # ---------------------------------------------------------------- elastic
    def complete_dcs(self) -> list:
        """The DCs whose server and every worker registered, in file order. O(registered)."""
        have: dict = {}
        for r in self.registered:
            have[(r["role"], r["dc"])] = have.get((r["role"], r["dc"]), 0) + 1
        return [dc.name for dc in self.dcs if have.get((SERVER, dc.name), 0) == 1 and
                have.get((WORKER, dc.name), 0) == dc.workers]

    def ready(self, min_dcs: int) -> bool:
        """Elastic (``min_dcs`` > 0): the run may start with the DCs complete now: at least
        ``min_dcs`` of them, and nothing registered from any other (a DC half registered
        is awaited; one not started joins later, docs/recovery-elastic.md)."""
        complete = self.complete_dcs()
        started = {r["dc"] for r in self.registered}
        return bool(min_dcs) and len(complete) >= min_dcs and started <= set(complete)

    def hold_places(self, address_of) -> list:
        """Hold the places of the DCs nothing registered from: a REGISTER-like entry for
        each one's server and workers (``address_of(dc)``: an address nothing answers on
        until the DC joins), so ids and ranks stay those of the cluster file. Their DCs,
        in file order. O(DCs x workers)."""
        started = {r["dc"] for r in self.registered}
        absent = [dc for dc in self.dcs if dc.name not in started]
        for dc in absent:
            where = address_of(dc)
            self.registered.append({"role": SERVER, "dc": dc.name, "address": where,
                                    "local_index": -1})
            self.registered += [{"role": WORKER, "dc": dc.name, "address": where,
                                 "local_index": i} for i in range(dc.workers)]
        return [dc.name for dc in absent]

    def table(self, scheduler_address: str) -> NodeTable:
        """Ids and ranks for everyone registered: the scheduler 0, servers in DC order, then
        workers DC by DC; within a DC, explicit local indices first, in order, then the
        rest in registration order."""
        order = {dc.name: i for i, dc in enumerate(self.dcs)}
        nodes = [NodeInfo(SCHEDULER_ID, SCHEDULER, "", scheduler_address)]
        servers = sorted((r for r in self.registered if r["role"] == SERVER),
                         key=lambda r: order[r["dc"]])
        for r in servers:
            nodes.append(NodeInfo(len(nodes), SERVER, r["dc"], r["address"], **_local(r)))
        rank = 0
        for dc in self.dcs:
            mine = [r for r in self.registered if r["role"] == WORKER and r["dc"] == dc.name]
            mine.sort(key=lambda r: (r["local_index"] < 0, max(r["local_index"], 0)))
            for local_rank, r in enumerate(mine):
                nodes.append(NodeInfo(len(nodes), WORKER, r["dc"], r["address"], rank,
                                      local_rank, **_local(r)))
                rank += 1
        return NodeTable(nodes)


def _local(meta: dict) -> dict:
    """Where a node can be reached without TCP by its DC's nodes on the same host."""
    return {"host": str(meta.get("host", "")), "local_address": str(meta.get("local_address", ""))}


def layout(dcs) -> dict:
    """What every node of a complete cluster of ``dcs`` is, as :meth:`Registration.table`
    assigns it: ``{id: (role, dc, rank, local_rank)}``, the scheduler 0, servers in DC
    order, then workers DC by DC in local rank order, ranks counted across DCs. A new
    scheduler checks what re-registering nodes claim against it (:mod:`.rebuild`). O(nodes)."""
    nodes = {SCHEDULER_ID: (SCHEDULER, "", -1, -1)}
    for dc in dcs:
        nodes[len(nodes)] = (SERVER, dc.name, -1, -1)
    rank = 0
    for dc in dcs:
        for local_rank in range(dc.workers):
            nodes[len(nodes)] = (WORKER, dc.name, rank, local_rank)
            rank += 1
    return nodes
