"""A node's watch on the scheduler, and how it takes a new one (``[recovery]
scheduler_restarts``, docs/recovery.md).

Without scheduler restarts a scheduler presumed dead (the Postoffice's verdict: its
connection closed, or silent past its learnt deadline) ends the node, naming it. With them
the node keeps its data path running and is *awaiting* a new scheduler: every beat it re-registers (a REGISTER carrying a report of
itself: :func:`report_meta`), for up to ``timeout_s``; the new scheduler rebuilds the
cluster from the reports (:mod:`netstorm.scheduler.rebuild`) and answers with a WELCOME
marked ``rebuilt``, which :func:`welcome_refusal` checks against the table this node
already has (the same ids, roles, DCs and ranks: a new scheduler may not renumber a running
cluster). Pure: the clock is passed in. O(1) per check, O(nodes) per WELCOME checked.
"""
from __future__ import annotations

from ..policy.tree import PolicyError
from .nodes import NodeTable

__all__ = ["SchedulerWatch", "identity", "policies_in_use", "report_meta", "welcome_refusal"]


class SchedulerWatch:
    """Whether the scheduler is alive, awaited back, or lost for good (see the module doc).
    ``restarts``: ``scheduler_restarts`` (0: a silent scheduler ends the node). Whether it
    is presumed dead is the Postoffice's judgment (its closed connection, or a silence past
    the deadline learnt from its beats: :meth:`Postoffice.scheduler_verdict`), passed in."""

    def __init__(self, scheduler_address: str, dead_after_s: float, timeout_s: float,
                 restarts: int, now: float):
        self.address = scheduler_address
        self.dead_after_s, self.timeout_s, self.restarts = dead_after_s, timeout_s, restarts
        self.seen = now                 # when the scheduler was last heard of
        self.lost_since: float | None = None    # since when a new one is awaited
        self.takeovers = 0              # new schedulers taken

    @property
    def lost(self) -> bool:
        """A new scheduler is awaited (this node re-registers every beat)."""
        return self.lost_since is not None

    def heard(self, now: float) -> None:
        """A message of the scheduler's was admitted (its key). While one is awaited only
        its WELCOME (:meth:`back`) ends the wait: an old one's queued beats do not."""
        if self.lost_since is None:
            self.seen = now

    def check(self, now: float, verdict: str) -> str:
        """Once a beat: "" while the scheduler is alive or a new one is still awaited, else
        why this node must stop (naming the scheduler). ``verdict``: why the scheduler is
        presumed dead ("" if it is not; asked only while none is awaited). The first
        verdict starts the wait when restarts are allowed."""
        if self.lost_since is None:
            if not verdict or not self.restarts:
                return verdict
            self.lost_since = now
            return ""
        if now - self.lost_since > self.timeout_s:
            return (f"the scheduler at {self.address} sent nothing for {now - self.seen:.1f}s "
                    f"and no new scheduler took the cluster over within timeout_s = "
                    f"{self.timeout_s:g}s ([recovery] scheduler_restarts = {self.restarts})")
        return ""

    def back(self, now: float) -> None:
        """A new scheduler's WELCOME was taken: it is alive again."""
        if self.lost_since is not None:
            self.takeovers += 1
        self.lost_since = None
        self.seen = now


def identity(table: NodeTable) -> list:
    """What a new scheduler must not change in a running cluster: every node's id, role,
    DC and ranks, in id order. O(nodes)."""
    return sorted((n.id, n.role, n.dc, n.rank, n.local_rank) for n in table.nodes.values())


def welcome_refusal(table: NodeTable, me_id: int, meta: dict) -> str:
    """Why a WELCOME received while running (``meta``, schema-checked) must be dropped
    ("" to take it): only a new scheduler's (``rebuilt``), addressed to this node, with the
    node table this node has (ids, roles, DCs, ranks)."""
    if not meta.get("rebuilt"):
        return "a WELCOME while running that is no new scheduler's (not rebuilt)"
    if meta.get("you") != me_id:
        return f"a WELCOME addressed to node {meta.get('you')}, not to node {me_id}"
    try:
        theirs = NodeTable.from_json(meta["nodes"])
    except (KeyError, TypeError, ValueError) as exc:
        return f"a WELCOME with a malformed node table: {exc}"
    if identity(theirs) != identity(table):
        return "a WELCOME whose node table differs from this node's (ids, roles, DCs, ranks)"
    return ""


def policies_in_use(book, rnd: int) -> list:
    """The versions of ``book`` (a PolicyBook) a round from ``rnd`` on may still use: the
    one in force at ``rnd`` and those starting later (what a server reports; older ones
    no round of it will use again). O(versions)."""
    try:
        keep = book.for_round(max(rnd, 1))
    except PolicyError:             # none in force yet: every one starts later
        return list(book.by_version.values())
    return [p for p in book.by_version.values()
            if p is keep or p.start_round > keep.start_round]


def report_meta(me, **state) -> dict:
    """The report a node re-registers with: itself (``me``, a NodeInfo) and ``state``
    (servers: ``policies``, ``round``, ``opened``, ``requested``, ``keys``; workers:
    ``finished``), as the REGISTER's ``report`` field (core/kinds.py)."""
    return {"node": me.to_json(), **state}
