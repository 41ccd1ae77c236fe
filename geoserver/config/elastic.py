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


def elastic_problem(min_dcs: int, dcs: int, sync_mode: str, compressed: bool,
                    adapt: bool = False) -> str:
    """Why ``min_dcs`` cannot run with the rest of the cluster file ("" when it can).
    Elastic membership re-sums a round in flight under a policy without a departed DC (as a
    server replacement does), so it shares the replacement's limits: ``fsa`` only, no
    ``[compression]`` (error-feedback residuals would already hold part of a replayed
    round)."""
    if not min_dcs:
        return ""
    if min_dcs > dcs:
        return (f"min_dcs = {min_dcs} is more than the {dcs} DC(s) the cluster file lists: "
                f"list up to the most DCs the run may have")
    if sync_mode != "fsa":
        return (f"min_dcs needs [sync] mode 'fsa': under {sync_mode!r} the workers' own "
                f"models are not on the servers a joining DC copies from")
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
