"""``esync``: how many local steps each worker takes before the next synchronization.

Pure, time passed in. ESync (Li et al., 2020) has a *state server* that knows every worker's
speed and gives fast workers more local steps, so that all reach the synchronization
together instead of waiting for the slowest. In netstorm the role is split where the
information already is, and nothing is sent that was not sent anyway:

- each **DC server** measures its own workers passively: the time from the value it sent a
  worker after round ``r - 1`` to that worker's first push of round ``r`` is the compute
  time of the steps it was given (:meth:`StepBalancer.on_reply`,
  :meth:`StepBalancer.on_push`);
- the **scheduler** learns each DC's slowest seconds per step from the heartbeats servers
  send anyway, and tells every server the slowest of the *other* DCs in its own heartbeats
  (it is the only node that hears from every DC, and it is off the data path; a DC's own
  figure is measured here, fresher than the one it reported a beat ago);
- the DC server then gives each worker ``round(slowest / its own seconds per step)`` steps
  (at least 1, at most ``max_steps``), in the value that ends round ``r``
  (:meth:`StepBalancer.steps`).

Every worker still contributes exactly once to every round: only the number of optimizer
steps inside its contribution varies. O(1) per call.
"""
from __future__ import annotations

__all__ = ["SMOOTHING", "StepBalancer"]

SMOOTHING = 0.5     # weight of the newest measurement of a worker's seconds per step


class StepBalancer:
    def __init__(self, max_steps: int):
        self.max_steps = max_steps
        self.step_s: dict = {}          # worker -> measured seconds per local step
        self.cluster_slowest = 0.0      # the scheduler's: slowest seconds per step elsewhere
        self._replied: dict = {}        # worker -> (round, when its latest value left)
        self._pushed: dict = {}         # worker -> latest round whose first push was timed
        self._given: dict = {}          # (worker, round) -> steps given after that round

    def given(self, worker: int, rnd: int) -> int:
        """The steps ``worker`` was given after round ``rnd`` (1 before any)."""
        return self._given.get((worker, rnd), 1)

    def on_reply(self, worker: int, rnd: int, now: float) -> None:
        """A value after round ``rnd`` left for ``worker`` (the last one is when it can
        compute: its next forward pass needs every key)."""
        self._replied[worker] = (rnd, now)

    def on_push(self, worker: int, rnd: int, now: float) -> None:
        """A push of round ``rnd`` from ``worker``; its first one of the round is timed."""
        if self._pushed.get(worker, 0) >= rnd:
            return
        self._pushed[worker] = rnd
        before, sent = self._replied.get(worker, (None, None))
        if before != rnd - 1 or sent is None:
            return
        seconds = (now - sent) / self.given(worker, rnd - 1)
        old = self.step_s.get(worker)
        self.step_s[worker] = seconds if old is None else \
            SMOOTHING * seconds + (1 - SMOOTHING) * old
        for key in [k for k in self._given if k[0] == worker and k[1] < rnd - 1]:
            del self._given[key]

    def slowest_here(self) -> float:
        """This DC's slowest seconds per step (0 before any measurement)."""
        return max(self.step_s.values(), default=0.0)

    def steps(self, worker: int, rnd: int) -> int:
        """How many local steps ``worker`` takes after round ``rnd`` (fixed at the first
        ask, so every key's value of the round says the same)."""
        known = self._given.get((worker, rnd))
        if known is not None:
            return known
        own = self.step_s.get(worker)
        slowest = max(self.cluster_slowest, self.slowest_here())
        steps = 1 if not own or not slowest else \
            max(1, min(self.max_steps, round(slowest / own)))
        self._given[(worker, rnd)] = steps
        return steps
