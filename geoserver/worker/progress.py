"""What a worker tells the scheduler about its data path, on the heartbeats it sends anyway,
and what a request that times out then says about the round it waited for.

On every beat (:meth:`Progress.beat_meta`) a worker reports how long it has sent nothing to
its server (``quiet_s``; 0 while a request of it waits: it is waiting, not silent), the
rounds it pushed of each key (``pushed``, as ``[[rounds, [keys...]], ...]`` and only when
they changed since the last beat), the oldest rounds it waits for (``waits``: ``[[key, round,
seconds waited], ...]``, key -1 for a barrier) and its median seconds per round
(``round_s``). The scheduler (:mod:`netstorm.scheduler.stalls`) answers a waiting worker
with who has not pushed those rounds (``missing``), which :func:`lacking` puts into the
error of a request that times out (docs/operations.md, *Stalls*). The I/O thread calls
the beat; the thread sending a request calls :meth:`Progress.sent`. Pure: the clock is the
caller's. A beat is O(keys + requests).
"""
from __future__ import annotations

import statistics
from collections import deque

from ..core.schema import MAX_WAITS
from ..core.wire import Kind

__all__ = ["BARRIER", "Progress", "ROUNDS_KEPT", "lacking", "missing_from"]

ROUNDS_KEPT = 32        # seconds per round: the median of this many latest rounds
BARRIER = -1            # a barrier's key in ``waits`` and ``missing``


class Progress:
    """One worker's data path as its heartbeats report it; ``now``: when it joined."""

    def __init__(self, now: float):
        self.last_sent = now        # when it last sent a request to its server (or a barrier)
        self.top_round = 0          # the highest round it pushed of any key
        self._round_at = None       # when it first pushed that round
        self._round_s: deque = deque(maxlen=ROUNDS_KEPT)    # seconds of its latest rounds
        self._reported = None       # the push counts the last beat carried

    def sent(self, kind: Kind, rnd: int, now: float) -> None:
        """A request went out (``rnd``: a push's round): the worker is not silent; the first
        push of a new highest round ends a round. O(1)."""
        self.last_sent = now
        if kind != Kind.PUSH or rnd <= self.top_round:
            return
        if self._round_at is not None:
            self._round_s.append((now - self._round_at) / (rnd - self.top_round))
        self.top_round, self._round_at = rnd, now

    def round_s(self) -> float | None:
        """The median seconds per round of its latest :data:`ROUNDS_KEPT` (None before two
        rounds). O(rounds kept)."""
        return statistics.median(tuple(self._round_s)) if self._round_s else None

    def beat_meta(self, keys: dict, busy: bool, needing: list, now: float) -> dict:
        """The heartbeat's meta. ``keys``: key -> its record (``pushes``: rounds pushed;
        another thread may declare keys meanwhile); ``busy``: a request of it waits;
        ``needing``: ``(since, (key, round))`` of the requests that need other workers (key
        None: a barrier), oldest first (:meth:`Requests.waiting`)."""
        meta = {"quiet_s": 0.0 if busy else round(max(0.0, now - self.last_sent), 3)}
        counts = {key: info.pushes for key, info in list(keys.items()) if info.pushes}
        if counts != self._reported:
            self._reported = counts
            by_count: dict = {}
            for key, n in counts.items():
                by_count.setdefault(n, []).append(key)
            meta["pushed"] = [[n, sorted(keys)] for n, keys in sorted(by_count.items())]
        waits, seen = [], set()
        for since, needs in needing:
            if needs in seen:
                continue
            seen.add(needs)
            key, rnd = needs
            waits.append([BARRIER if key is None else key, rnd, round(max(0.0, now - since), 3)])
            if len(waits) == MAX_WAITS:
                break
        if waits:
            meta["waits"] = waits
        round_s = self.round_s()
        if round_s is not None:
            meta["round_s"] = round(round_s, 6)
        return meta


def missing_from(rows) -> dict:
    """The scheduler's ``missing`` rows as ``{(key, round): [who, ...]}`` (key None: a
    barrier)."""
    return {(None if key == BARRIER else int(key), int(rnd)): [str(w) for w in who]
            for key, rnd, who in rows}


def lacking(missing: dict, needs) -> str:
    """What a request needing ``needs`` (key, round) waits for, by the scheduler's latest
    word ``missing`` (:func:`missing_from`): "" if it said nothing of that round."""
    if needs is None or tuple(needs) not in missing:
        return ""
    key, rnd = needs
    who = missing[tuple(needs)]
    if key is None:
        return f"the barrier waits for {', '.join(who)}" if who else ""
    if not who:
        return (f"every worker has pushed round {rnd} of key {key} (by the scheduler's "
                f"latest reports): it waits on the DC servers or the WAN")
    return (f"round {rnd} of key {key} lacks the {'push' if len(who) == 1 else 'pushes'} "
            f"of {', '.join(who)}")
