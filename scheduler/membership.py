"""Elastic data centers: which DCs are members of the run, whether one may leave or join,
the WAN policy over the members, and how many workers contribute to a round
(docs/recovery-elastic.md).

Pure logic, no sockets, no clock. Membership is what the policy in force spans: the
scheduler's :class:`Membership` says whether a change is allowed (at least ``min_dcs``
members remain; a joining DC is one of the cluster file's and not a member yet), and
:func:`member_policy` builds the new version's trees over the members with the planner the
cluster uses (a star at the hub, or the hub's stand-in; fapt trees planned on the
sub-topology of the members' links). Every DC computes the divisor of a round from the
policy that round uses (:meth:`Policy.contributors`), so replicas stay bit-identical.
"""
from __future__ import annotations

from netstorm.geoserver.policy.tree import Policy

from .planning import NOMINAL_MODEL_BYTES, compute_policy
from .policy import star_policy
from .topology import Topology, TopologyError

__all__ = ["Membership", "MembershipError", "member_policy"]


class MembershipError(RuntimeError):
    """A membership change the cluster cannot make; the text names the DC and why."""


class Membership:
    def __init__(self, dcs, min_dcs: int, members=None, rejoins: int = 0):
        """``dcs``: every DC of the cluster file, in file order; ``min_dcs``: the fewest the
        run goes on with (0: all of them, not elastic); ``members``: those in the run now
        (default: all); ``rejoins``: how often, in all, a DC that left may come back."""
        self.dcs = tuple(dcs)
        self.min_dcs = min_dcs or len(self.dcs)
        wanted = set(self.dcs if members is None else members)
        unknown = wanted - set(self.dcs)
        if unknown:
            raise MembershipError(f"unknown DC(s) {sorted(unknown)}; the cluster file has "
                                  f"{list(self.dcs)}")
        self.members = tuple(dc for dc in self.dcs if dc in wanted)
        self.departed: dict = {}        # dc -> why it left
        self.rejoins_left = rejoins

    @property
    def elastic(self) -> bool:
        return self.min_dcs < len(self.dcs)

    def leave_refusal(self, dc: str) -> str:
        """Why ``dc`` cannot leave now ("" when it can). O(DCs)."""
        if dc not in self.members:
            return f"{dc} is not a member of the run (members: {', '.join(self.members)})"
        if not self.elastic:
            return "the cluster is not elastic ([elastic] min_dcs is not set)"
        if len(self.members) - 1 < self.min_dcs:
            return (f"only {len(self.members) - 1} DC(s) would remain, fewer than "
                    f"min_dcs = {self.min_dcs}")
        return ""

    def leave(self, dc: str, why: str) -> tuple:
        """Drop ``dc`` (it left, ``why``); the members that remain.
        :class:`MembershipError` if :meth:`leave_refusal` says no. O(DCs)."""
        refusal = self.leave_refusal(dc)
        if refusal:
            raise MembershipError(f"{dc} {why}, and the run cannot go on without it: "
                                  f"{refusal}")
        self.members = tuple(d for d in self.members if d != dc)
        self.departed[dc] = why
        return self.members

    def may_come_back(self, dc: str) -> bool:
        """Whether ``dc``, if it left now, could rejoin (a rejoin is left). O(1)."""
        return self.elastic and self.rejoins_left > 0 and dc in self.dcs

    def join_refusal(self, dc: str) -> str:
        """Why ``dc`` cannot join now ("" when it can). O(DCs)."""
        if dc not in self.dcs:
            return f"unknown DC {dc!r}; the cluster file has {list(self.dcs)}"
        if dc in self.members:
            return f"{dc} is a member of the run already"
        if dc in self.departed and not self.rejoins_left:
            return (f"{dc} left the run ({self.departed[dc]}), and no rejoin is left "
                    f"([elastic] rejoins)")
        if not self.elastic:
            return "the cluster is not elastic ([elastic] min_dcs is not set)"
        return ""

    def join(self, dc: str) -> tuple:
        """Add ``dc``; the members now (file order). :class:`MembershipError` if
        :meth:`join_refusal` says no. O(DCs)."""
        refusal = self.join_refusal(dc)
        if refusal:
            raise MembershipError(f"{dc} cannot join: {refusal}")
        if self.departed.pop(dc, None) is not None:
            self.rejoins_left -= 1
        self.members = tuple(d for d in self.dcs if d in self.members or d == dc)
        return self.members


def member_policy(config, members, version: int, start_round: int,
                  topology: Topology | None = None) -> Policy:
    """The WAN policy ``version`` in force from ``start_round`` over ``members`` only.
    ``star`` (or one member, or a planning WAN whose members' links do not connect them):
    a star at the cluster's hub, or at the first member when the hub is not one.
    ``fapt``: trees planned by :func:`compute_policy` on ``topology`` (the WAN the first
    policy was planned on) cut down to the members and the links between them.
    :class:`MembershipError` for no members. O(planning the members' sub-topology)."""
    members = [dc.name for dc in config.dcs if dc.name in set(members)]
    if not members:
        raise MembershipError("no DC is left to run")
    hub = config.hub_dc if config.hub_dc in members else members[0]
    sub = None
    if config.policy == "fapt" and len(members) > 1 and topology is not None:
        links = tuple(l for l in topology.links if l.a in members and l.b in members)
        try:
            sub = Topology(name=f"{topology.name}-members", dcs=tuple(members), links=links)
        except TopologyError:
            sub = None              # the members' links do not join them: a star
    if sub is None:
        return star_policy(members, hub, version=version, start_round=start_round)
    plan = compute_policy(sub, NOMINAL_MODEL_BYTES, chunk_bytes=config.chunk_bytes,
                          version=version, start_round=start_round,
                          split=config.trees == "split")
    return Policy(version=version, start_round=start_round, trees=plan.policy.trees,
                  shares=tuple(plan.shares))
