"""A new scheduler rebuilding a running cluster from what its nodes report
(``[recovery] scheduler_restarts``, docs/recovery.md).

When the scheduler dies, the nodes keep training and, once it has been silent for
``dead_after_s``, re-register every beat with a REGISTER carrying a report of themselves
(:func:`netstorm.geoserver.core.scheduler_watch.report_meta`): who they are (id, role, DC,
ranks, address) and, for servers, the policy versions they hold, their round, the round
gate's state and each key's applied round; workers add the workers they heard finish. A
new scheduler started with the same cluster file takes those reports here:

* every claim is checked against the cluster file (:func:`~.registration.layout`: node
  ``i`` has one role, DC and rank in every cluster of that file), the DC against the key
  the REGISTER came with (by the caller: ``roles.register_refusal``), and ids are unique
  (a second process claiming a taken id from another address is refused);
* it is complete once every node of the file reported or is known to have finished;
* the policies (:meth:`Rebuild.policies`): the union of the versions the servers hold (one
  version held twice, differently, is refused), the latest of them in force as the servers
  see it, and, for a server lacking a version, either that version is sent to it (it has
  not reached its start round) or the rebuild fails naming it (the version was in force
  at a round that server already started under another policy: the DCs summed different
  trees, which nothing can undo). A new version is never announced here: the next one the
  scheduler plans is numbered after every version held and starts after every server's
  round (:class:`~.rounds.RoundTracker`).

Pure: no sockets, no clock. ``add`` is O(policies + workers of a DC); the rest O(nodes x
policies).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from netstorm.geoserver.core.nodes import SCHEDULER, SERVER, WORKER, NodeInfo, NodeTable
from netstorm.geoserver.policy.tree import Policy, PolicyBook, PolicyError

from .registration import SCHEDULER_ID, layout

__all__ = ["PolicyPlan", "Rebuild", "RebuildError", "Report", "claim_refusal"]


class RebuildError(RuntimeError):
    """The reports describe a cluster no scheduler can take over; the text says why."""


@dataclass(frozen=True)
class Report:
    """One node's report, checked (see the module doc)."""

    node: NodeInfo
    policies: tuple = ()            # servers: the Policy versions held
    round: int = 0                  # servers: the latest round a local worker pushed for
    opened: int = 0                 # servers: the latest round the round gate saw opened
    requested: int = 0              # servers: the latest round asked of the scheduler
    finished: frozenset = frozenset()   # workers: ranks heard to have finished
    workers: tuple = ()             # servers: their DC's workers (NodeInfo), as they know them
    keys: tuple = ()                # servers: (key, applied round) pairs


@dataclass
class PolicyPlan:
    """What the new scheduler adopts: every version held (``book``), the latest
    (``latest``), the versions to send to servers lacking them (``{server id: [Policy]}``)."""

    book: PolicyBook
    latest: Policy
    resend: dict = field(default_factory=dict)


def claim_refusal(expected: dict, node: NodeInfo) -> str:
    """Why ``node`` (what a REGISTER claims) is no node of the cluster ``expected``
    (:func:`~.registration.layout`) ("" if it is)."""
    if node.id == SCHEDULER_ID or node.id not in expected:
        return f"node id {node.id} is no server's or worker's of this cluster"
    role, dc, rank, local_rank = expected[node.id]
    if (node.role, node.dc) != (role, dc) or \
            (role == WORKER and (node.rank, node.local_rank) != (rank, local_rank)):
        theirs = f"{node.role} of {node.dc!r} (rank {node.rank}, local {node.local_rank})"
        ours = f"{role} of {dc!r}" + (f" (rank {rank}, local {local_rank})"
                                       if role == WORKER else "")
        return f"node {node.id} claims to be a {theirs}; the cluster file makes it a {ours}"
    return ""


class Rebuild:
    """The reports of a running cluster's nodes to a new scheduler (see the module doc).
    ``dcs``: the cluster file's DataCenters, in file order."""

    def __init__(self, dcs):
        self.dcs = tuple(dcs)
        self.names = [dc.name for dc in self.dcs]
        self.expected = layout(self.dcs)
        self.reports: dict = {}         # node id -> Report

    def add(self, meta: dict) -> str:
        """Take one REGISTER's meta (its schema checked, its DC that of its key); why it
        is refused ("" if taken). A node reporting again replaces its report (it
        re-registers every beat until welcomed)."""
        raw = meta.get("report")
        if not isinstance(raw, dict):
            return ("this scheduler is rebuilding a running cluster: only its nodes may "
                    "register, with their report (a fresh node joins no running cluster)")
        try:
            node = NodeInfo.from_json(raw["node"])
        except (KeyError, TypeError, ValueError) as exc:
            return f"malformed report: {exc}"
        if (node.role, node.dc, node.address) != (meta.get("role"), meta.get("dc"),
                                                  meta.get("address")):
            return (f"the report of node {node.id} ({node.role} of {node.dc} at "
                    f"{node.address}) contradicts its REGISTER ({meta.get('role')} of "
                    f"{meta.get('dc')} at {meta.get('address')})")
        problem = claim_refusal(self.expected, node)
        if problem:
            return problem
        known = self.reports.get(node.id)
        if known is not None and known.node.address != node.address:
            return (f"node {node.id} ({node.describe()}) already reported from "
                    f"{known.node.address}; another process claims it from {node.address}")
        try:
            report = self._report(node, raw)
        except (PolicyError, KeyError, TypeError, ValueError) as exc:
            return f"the report of {node.describe()}: {exc}"
        self.reports[node.id] = report
        return ""

    def _report(self, node: NodeInfo, raw: dict) -> Report:
        if node.role != SERVER:
            return Report(node, finished=frozenset(int(r) for r in raw.get("finished", ())))
        workers = tuple(NodeInfo.from_json(w) for w in raw.get("workers", ()))
        for worker in workers:
            problem = claim_refusal(self.expected, worker)
            if problem or worker.dc != node.dc or worker.role != WORKER:
                raise ValueError(f"it lists {worker.describe()}, no worker of {node.dc}"
                                 + (f": {problem}" if problem else ""))
        return Report(node, tuple(Policy.from_json(p, self.names)
                                  for p in raw.get("policies", ())),
                      int(raw.get("round", 0)), int(raw.get("opened", 0)),
                      int(raw.get("requested", 0)), workers=workers,
                      keys=tuple((int(k), int(n)) for k, n in raw.get("keys", ())))

    # ------------------------------------------------------------ the cluster
    def finished(self) -> set:
        """The ids of the workers some worker heard finish (they re-register no more)."""
        ranks = set().union(*(r.finished for r in self.reports.values()))
        return {i for i, (role, _, rank, _) in self.expected.items()
                if role == WORKER and rank in ranks}

    def missing(self) -> list:
        """The ids of the nodes still awaited, in id order."""
        done = self.finished()
        return [i for i in self.expected
                if i != SCHEDULER_ID and i not in self.reports and i not in done]

    @property
    def complete(self) -> bool:
        return not self.missing()

    def describe_missing(self, ids=None) -> str:
        """E.g. ``"server of dc1 (node 1), worker rank 2 (dc2/0, node 5)"`` (``ids``: those,
        else every node still awaited)."""
        return ", ".join(self._describe(i) for i in (self.missing() if ids is None else ids))

    def listed(self) -> dict:
        """``{id: NodeInfo}`` of the workers the servers' reports list (their DC's)."""
        return {w.id: w for r in self.reports.values() for w in r.workers}

    def restarted(self, fresh: list) -> set:
        """The missing workers a fresh REGISTER (``fresh``: metas, their DC that of their
        key) takes the place of: a worker of that DC and local index that no report came
        from, and that a server's report lists (the table needs its entry). Such a worker
        died while the scheduler was away and its launcher restarted it; the new scheduler
        takes the cluster over with it lost, and the REGISTER back into its rank. O(fresh
        x missing)."""
        listed, taken = self.listed(), set()
        for meta in fresh:
            for i in self.missing():
                role, dc, _, local_rank = self.expected[i]
                if i not in taken and i in listed and role == WORKER and \
                        (meta.get("role"), meta.get("dc"), meta.get("local_index")) == \
                        (role, dc, local_rank):
                    taken.add(i)
                    break
        return taken

    def _describe(self, node_id: int) -> str:
        role, dc, rank, local_rank = self.expected[node_id]
        return NodeInfo(node_id, role, dc, "", rank, local_rank).describe()

    def table(self, scheduler_address: str) -> NodeTable:
        """The node table of the running cluster: the reported nodes, and the finished
        workers and those still missing (to be handled as lost) as their DC's server
        knows them. :class:`RebuildError` naming a node no report gives."""
        nodes = {SCHEDULER_ID: NodeInfo(SCHEDULER_ID, SCHEDULER, "", scheduler_address)}
        nodes.update({i: r.node for i, r in self.reports.items()})
        listed = self.listed()
        for i in sorted(set(self.expected) - set(nodes)):
            if i not in listed:
                state = "finished" if i in self.finished() else "did not come back"
                raise RebuildError(f"{self._describe(i)} {state}, and no server's report "
                                   f"lists it")
            nodes[i] = listed[i]
        return NodeTable([nodes[i] for i in sorted(nodes)])

    def servers(self) -> list:
        """The servers' reports, in id order."""
        return [r for i, r in sorted(self.reports.items()) if r.node.role == SERVER]

    def policies(self) -> PolicyPlan:
        """The policies to adopt (see the module doc); :class:`RebuildError` naming the
        servers when they hold one version differently, when one lacks a version that was
        in force at a round it already started, or when no server holds any."""
        servers = self.servers()
        book, holder = PolicyBook(), {}
        for report in servers:
            for policy in report.policies:
                try:
                    book.add(policy)
                except PolicyError as exc:
                    raise RebuildError(
                        f"the servers of {holder[policy.version]} and {report.node.dc} hold "
                        f"policy {policy.version} differently ({exc})") from exc
                holder.setdefault(policy.version, report.node.dc)
        if book.empty:
            raise RebuildError("no server holds a policy: the cluster had not started")
        resend = {}
        for report in servers:
            held = {p.version for p in report.policies}
            now = max(report.round, 1)
            for version, policy in sorted(book.by_version.items()):
                if version in held:
                    continue
                if policy.start_round > report.round:
                    resend.setdefault(report.node.id, []).append(policy)    # not reached
                elif book.for_round(now) is policy:
                    raise RebuildError(
                        f"the server of {report.node.dc} lacks policy {version} (from round "
                        f"{policy.start_round}, held by {holder[version]}) and already "
                        f"started round {report.round} under another: the DCs summed that "
                        f"round over different trees")
        return PolicyPlan(book, book.by_version[max(book.by_version)], resend)

    def rounds(self) -> dict:
        """``{server id: its round}``."""
        return {r.node.id: r.round for r in self.servers()}

    def opened(self) -> int:
        """The latest round any server saw opened (the old scheduler opened it)."""
        return max((r.opened for r in self.servers()), default=0)
