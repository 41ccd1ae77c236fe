"""*pure* The ``[elastic]`` table and the launcher's ``--dcs MIN:MAX``: how few data centers
a run goes on with (docs/recovery-elastic.md); the table itself is read by
:func:`~netstorm.geoserver.config.cluster_tables.parse_elastic`.

``min_dcs = 0`` (the default) means not elastic: every DC of the cluster file must register
and a lost DC server ends the run (or is replaced, ``[recovery]``). With ``1 <= min_dcs <=
DCs`` the run starts once ``min_dcs`` servers registered with all their workers, a DC may join
later, and a DC that leaves (or dies with no restart left) is dropped while at least
``min_dcs`` remain. O(1) each.
"""
from __future__ import annotations

__all__ = ["DcsRangeError", "elastic_problem", "parse_dcs_range"]


class DcsRangeError(ValueError):
    """``--dcs`` is neither ``N`` nor ``MIN:MAX``; the text says why."""


def elastic_problem(min_dcs: int, dcs: int, sync, compressed: bool,
                    adapt: bool = False, rejoins: int = 0) -> str:
    """Why ``min_dcs`` cannot run with the rest of the cluster file ("" when it can);
    ``sync``: its :class:`~netstorm.geoserver.config.sync.SyncConfig`. Elastic membership
    re-sums a round in flight under a policy without a departed DC, and a joining DC copies
    the members' replicas (as a server replacement does), so it shares the replacement's
    limits: ``fsa``, ``diloco`` or ``hfa`` with ``k2 = 1`` (every round is on the servers
    of every DC, and the averaging modes divide by the workers of the DCs a round's policy
    spans), no ``[compression]`` (error-feedback residuals would already hold part of a
    replayed round). Not with quorum rounds yet: they count every DC of the file.
    ``rejoins`` (how often a departed DC may come back) needs ``min_dcs``."""
    if not min_dcs:
        return "rejoins needs min_dcs: only an elastic run has DCs that leave" if rejoins \
            else ""
    if min_dcs > dcs:
        return (f"min_dcs = {min_dcs} is more than the {dcs} DC(s) the cluster file lists: "
                f"list up to the most DCs the run may have")
    if sync.mode not in ("fsa", "diloco", "hfa"):
        return (f"min_dcs needs [sync] mode 'fsa', 'diloco' or 'hfa': under {sync.mode!r} "
                f"the DCs' replicas are not one model a joining DC could copy")
    if sync.rounds_per_wan_round > 1:
        return (f"min_dcs needs [sync] k2 = 1 under 'hfa' (got {sync.k2}): the DC rounds "
                f"since the last WAN round are only on each DC's own server")
    if sync.quorum:
        return ("min_dcs cannot run with [sync] quorum yet: quorum rounds wait for the offers "
                "of every DC the cluster file lists")
    if compressed:
        return ("min_dcs cannot run with [compression]: a round replayed without a departed "
                "DC would meet error-feedback residuals that already hold part of it")
    if adapt:
        return ("min_dcs cannot run with [wan] adapt yet: re-planning would put a departed "
                "DC back into the trees")
    return ""


def parse_dcs_range(text: str) -> tuple:
    """``--dcs``: ``"N"`` -> ``(N, N)`` (not elastic), ``"MIN:MAX"`` -> ``(MIN, MAX)`` with
    ``1 <= MIN <= MAX``; :class:`DcsRangeError` otherwise."""
    parts = str(text).split(":")
    if len(parts) > 2 or not all(p.strip().isdigit() for p in parts):
        raise DcsRangeError(f"--dcs must be a count N or a range MIN:MAX of counts, "
                            f"not {text!r}")
    low, high = int(parts[0]), int(parts[-1])
    if low < 1 or low > high:
        raise DcsRangeError(f"--dcs {text}: need 1 <= MIN <= MAX")
    return low, high
