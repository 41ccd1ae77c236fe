"""Round tracking at the scheduler: the rounds servers report, the rounds opened (round
gate), the policies announced, and from which round a new one can start.

Pure logic, no sockets, time passed in. Servers piggyback the latest round they started (with
the round gate: the latest they asked for) on their heartbeats; :meth:`RoundTracker.report`
records it. Without the round gate a new policy starts ahead of time
(:meth:`RoundTracker.rounds_ahead`); with it, at the first round not yet open.
"""
from __future__ import annotations

import collections
import math

from netstorm.geoserver.policy.tree import Policy, PolicyBook

from .awareness import safe_start_round

__all__ = ["RATE_WINDOW_S", "ROUNDS_SEEN", "ROUND_LOG", "RoundTracker"]

ROUND_LOG = 64          # (time, latest round) reports kept for the round rate
ROUNDS_SEEN = 16        # rounds whose first report time is kept
RATE_WINDOW_S = 5.0     # the round rate is measured over this many recent seconds


class RoundTracker:
    def __init__(self, round_gate: bool, heartbeat_s: float):
        self.round_gate = round_gate
        self.heartbeat_s = heartbeat_s
        self.rounds: dict = {}          # server id -> latest round started (from heartbeats)
        self.round_log = collections.deque(maxlen=ROUND_LOG)   # (time, max round) reported
        self.round_seen: dict = {}      # round -> when a DC was first reported in it
        self.opened = 0                 # the latest round opened (round gate)
        self.policy: Policy | None = None   # the latest policy announced
        self.announced = PolicyBook()   # the policies sent that may still apply (relays follow
                                        # the one in force, which may be older than .policy)

    def report(self, server, rnd: int, now: float) -> None:
        """A heartbeat of ``server`` said it is in round ``rnd``."""
        self.rounds[server] = rnd
        latest = self.latest
        self.round_log.append((now, latest))
        self.round_seen.setdefault(latest, now)
        if len(self.round_seen) > ROUNDS_SEEN:
            del self.round_seen[min(self.round_seen)]

    @property
    def latest(self) -> int:
        """The latest round any server reported (0: none yet)."""
        return max(self.rounds.values(), default=0)

    def open(self, rnd: int) -> bool:
        """A server asks for round ``rnd``: True when it opens now (it was not open yet)."""
        if rnd <= self.opened:
            return False
        self.opened = rnd
        return True

    def current_round(self) -> int:
        """The latest round open (round gate) or reported."""
        return self.opened if self.round_gate else self.latest

    def policy_in_force(self) -> Policy:
        """The policy of :meth:`current_round`, as servers choose it."""
        return self.announced.for_round(self.current_round())

    def first_policy(self, policy: Policy) -> None:
        self.policy = policy
        self.announced.add(policy)

    def rounds_ahead(self, lead_rounds: int, now: float) -> int:
        """The first round a policy announced now can safely start at, plus ``lead_rounds``
        - 1. Short rounds: the latest reported round plus the rounds the fastest DC may run
        before the announcement reaches it (reports are up to one heartbeat old; twice that
        plus a second, at the round rate of the last few seconds), plus one. Long rounds:
        :func:`netstorm.scheduler.awareness.safe_start_round`, often the very next round."""
        latest = self.latest
        margin = 2 * self.heartbeat_s + 1.0
        window = [(t, r) for t, r in self.round_log if now - t <= RATE_WINDOW_S]
        rate = 0.0
        if len(window) >= 2 and window[-1][0] > window[0][0]:
            rate = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])
        short = latest + math.ceil(rate * margin) + 1
        return max(short, safe_start_round(latest, self.round_seen, now, margin)) \
            + lead_rounds - 1

    def replay_policy(self, start: int) -> Policy:
        """The next version, in force from round ``start`` whatever was announced for later
        rounds, with the trees of the policy in force at ``start`` (a later one may have
        been planned from what the lost DC's silence looked like): the rounds a lost DC's
        server had in flight are replayed under it (docs/recovery.md)."""
        then = self.announced.for_round(start)
        self.policy = Policy(self.policy.version + 1, start, then.trees, then.shares)
        self.announced.replay(self.policy)
        return self.policy

    def next_policy(self, trees, shares, lead_rounds: int, now: float) -> Policy:
        """The next policy version, with ``trees`` and ``shares``: with the round gate in
        force from the first round not yet open, otherwise from :meth:`rounds_ahead`;
        never before the previous version's start (a newer policy must not be shadowed).
        Versions no round can use any more are forgotten."""
        ahead = self.opened + 1 if self.round_gate else self.rounds_ahead(lead_rounds, now)
        start = max(ahead, self.policy.start_round)
        self.policy = Policy(self.policy.version + 1, start, tuple(trees), tuple(shares))
        self.announced.add(self.policy)
        self.announced.drop_superseded(self.current_round())
        return self.policy
