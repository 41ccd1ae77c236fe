"""The server's round gate (with ``adapt``): a round's pushes reach the WAN only once the
scheduler has opened that round.

Pure logic, no sockets, time passed in. The server offers each local worker's push to the
gate; a push of a round not yet open is held, and the first push of a round newer than any
asked for tells the server to ask now (an early heartbeat carrying :attr:`RoundGate.requested`),
so a re-planned policy can start at the very next round. When the scheduler opens a round,
the pushes of every round up to it are released in arrival order. Pushes held longer than
``timeout_s`` (a dead scheduler) make :meth:`RoundGate.overdue` name the round.

The scheduler is kept off the critical path: the first push of the latest open round asks
for the next one at once (:meth:`RoundGate.passed`), so that round is normally open before
its first push arrives, a round's worth of time later, and nothing waits for a scheduler
round trip (a re-planned policy then starts one round later than it could).
:attr:`RoundGate.waits` and :attr:`RoundGate.waited_s` count the rounds that did wait.
"""
from __future__ import annotations

__all__ = ["RoundGate"]


class RoundGate:
    def __init__(self, enabled: bool, timeout_s: float):
        """``enabled``: False passes every round at once (no adapt)."""
        self.enabled = enabled
        self.timeout_s = timeout_s
        self.opened = 0                 # the latest round the scheduler opened
        self.requested = 0              # the latest round this DC asked for
        self._held: list = []           # (round, item) of rounds not yet open, arrival order
        self._held_since: float | None = None
        self.waits = 0                  # rounds whose first push had to wait
        self.waited_s = 0.0             # how long they waited in all
        self._waiting: dict = {}        # round -> when its first push was held

    def closed(self, rnd: int) -> bool:
        """Whether a push of round ``rnd`` must wait."""
        return self.enabled and rnd > self.opened

    def hold(self, rnd: int, item, now: float) -> bool:
        """Keep ``item`` (a push of the closed round ``rnd``) until its round opens. True
        when ``rnd`` is newer than any round asked for: ask the scheduler now."""
        if not self._held:
            self._held_since = now
        self._held.append((rnd, item))
        self._waiting.setdefault(rnd, now)
        if rnd > self.requested:
            self.requested = rnd
            return True
        return False

    def open(self, rnd: int, now: float) -> list:
        """The scheduler opened ``rnd`` (and so every round before it): the items now
        released, in arrival order. The timeout of those still held starts again."""
        self.opened = max(self.opened, rnd)
        for r in [r for r in self._waiting if r <= self.opened]:
            self.waits += 1
            self.waited_s += now - self._waiting.pop(r)
        ready = [item for r, item in self._held if r <= self.opened]
        self._held = [(r, item) for r, item in self._held if r > self.opened]
        self._held_since = now if self._held else None
        return ready

    def passed(self, rnd: int) -> bool:
        """A push of the open round ``rnd`` goes on: True when the next round should be
        asked for now (``rnd`` is the latest open round and the next was not asked for)."""
        if self.enabled and rnd == self.opened and rnd + 1 > self.requested:
            self.requested = rnd + 1
            return True
        return False

    @property
    def held(self) -> int:
        return len(self._held)

    def overdue(self, now: float) -> str | None:
        """Why the run cannot go on, once pushes waited longer than ``timeout_s``; else
        None."""
        if self._held and now - self._held_since > self.timeout_s:
            return (f"round {self._held[0][0]} not opened by the scheduler within "
                    f"timeout_s={self.timeout_s:g}s; its {len(self._held)} pushes cannot "
                    f"start")
        return None
