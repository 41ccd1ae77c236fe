"""``esync``: how many local steps a worker's DC server asks for after each round
(docs/sync.md), for the worker client: the counts come with the values the client finishes
and are awaited by the training loop; only the latest :data:`KEPT_STEP_COUNTS` rounds are kept.
"""
from __future__ import annotations

from .settings import KVStoreError

__all__ = ["KEPT_STEP_COUNTS", "StepCounts"]

KEPT_STEP_COUNTS = 64   # esync: step counts kept per worker (keys a few rounds apart)


class StepCounts:
    """The step counts of one worker, waited for on ``requests.changed``
    (:class:`~netstorm.geoserver.worker.requests.Requests`, which wakes it on an abort)."""

    def __init__(self, requests):
        self.requests = requests
        self.known = {0: 1}     # round -> local steps before the next round

    def record(self, rnd: int, steps: int) -> None:
        """The value of round ``rnd`` came with ``steps``."""
        with self.requests.changed:
            self.known[rnd] = steps
            self.requests.changed.notify_all()

    def after(self, rnd: int, server: str) -> int:
        """How many local steps ``server`` (as described) asked for after round ``rnd``,
        waiting (bounded by ``timeout_s``) until that round's value has come. O(kept)."""
        requests, changed = self.requests, self.requests.changed
        with changed:
            if not changed.wait_for(lambda: rnd in self.known or requests.aborted,
                                    requests.timeout_s):
                raise KVStoreError(f"worker rank {requests.rank}: waited "
                                   f"{requests.timeout_s:g}s for the step count after round "
                                   f"{rnd} from {server}")
            if rnd not in self.known:
                raise KVStoreError(f"worker rank {requests.rank}: {requests.aborted}")
            for old in [r for r in self.known if r < rnd - KEPT_STEP_COUNTS]:
                del self.known[old]
            return self.known[rnd]
