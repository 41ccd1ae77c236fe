"""Messages held until a moment: the receiving side of an emulated propagation delay
(:mod:`netstorm.geoserver.config.emulation`). Pure: the caller gives the times.

Each item is due at the moment it was held plus its delay. Items held with the same delay
come out in the order they went in (one sender's messages keep their order, as on a link);
ties between equal due moments go by arrival.
"""
from __future__ import annotations

import heapq
import itertools

__all__ = ["DelayLine"]


class DelayLine:
    def __init__(self):
        self._heap: list = []
        self._seq = itertools.count()

    def hold(self, item, due: float) -> None:
        """Keep ``item`` until ``due``. O(log n)."""
        heapq.heappush(self._heap, (due, next(self._seq), item))

    def pop_due(self, now: float):
        """The earliest item due at ``now``, or None. O(log n)."""
        if self._heap and self._heap[0][0] <= now:
            return heapq.heappop(self._heap)[2]
        return None

    def wait_s(self, now: float):
        """Seconds until the next item is due (0 if one is), None when empty. O(1)."""
        return None if not self._heap else max(0.0, self._heap[0][0] - now)

    def __len__(self) -> int:
        return len(self._heap)
