"""Worker restarts under the local-update sync modes (docs/recovery-localrestart.md).

Under ``diloco`` (one fragment, no delay) and ``hfa`` (``k2 = 1``) a worker's model is, at
each of its synchronizations, the DC's synchronized model (the same on every DC). A worker
restarted into its rank resumes at its rank's next synchronization: it takes that model
from its DC server as its weights and base, a fresh inner optimizer state, and its local
step counter at ``rounds x steps_per_round``. The local steps its lost process took since
its last synchronization are lost, never applied.

:func:`worker_restart_problem` says why a sync configuration cannot restart workers;
:func:`steps_per_round` how many inner steps make one synchronization. O(1).
"""
from __future__ import annotations

__all__ = ["steps_per_round", "worker_restart_problem"]


def steps_per_round(sync) -> int | None:
    """Inner (optimizer) steps per synchronization round of one worker: 1 under fsa (a
    step is a round), ``h`` under diloco, ``k1`` under hfa; None when it varies (esync: the
    server says after each round; mixed: workers push gradients, 1)."""
    if sync.mode == "diloco":
        return sync.h
    if sync.mode == "hfa":
        return sync.k1
    if sync.mode == "esync":
        return None
    return 1


def worker_restart_problem(sync) -> str:
    """Why ``[recovery] worker_restarts`` cannot run with ``sync`` ('' when it can)."""
    why = "the workers' own models and step counts are not on the servers"
    if sync.mode == "fsa":
        return ""
    if sync.mode == "diloco":
        if sync.streaming:
            return (f"needs [sync] fragments = 1 and delay = 0 under 'diloco' (got "
                    f"fragments = {sync.fragments}, delay = {sync.delay}): a streamed "
                    f"worker's fragments are synchronized at different steps, so no "
                    f"single round of the servers is its model")
        return ""
    if sync.mode == "hfa":
        if sync.k2 > 1:
            return (f"needs [sync] k2 = 1 under 'hfa' (got {sync.k2}): between WAN rounds "
                    f"a DC's model is its own, so a restarted worker cannot take up its "
                    f"step count from it")
        return ""
    return f"needs [sync] mode 'fsa', 'diloco' or 'hfa': under {sync.mode!r} {why}"
