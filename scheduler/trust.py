"""Which link estimates the planner may act on: those that explain what the rounds took.

A passive estimate can be wrong for reasons no single window shows: a receiver or sender
that was descheduled, a sender that could not keep its link busy (CPU, not the link), a
first window in slow start. Acting on one costs: on static paper9 with delays, re-planning
on such readings made ``netstorm-aware`` 0.89-0.92x as fast as frozen ``netstorm-fapt``;
on hetero6 one link read at 55% of its rate made the policy in force look 73% slower
than it was, and ``netstorm-full`` switched away from it (docs/awareness.md).

The scheduler sees what matters: how long each round took. After every completed round,
:class:`EstimateTrust` predicts it under the policy it ran twice: with the rates it trusts
and with the fresh estimates. Neither prediction is the round's time (the model leaves out
compute, CPU and the model's real size), but the right rates predict it up to a factor
that does not change from round to round. So over the last :data:`WINDOW` rounds it
looks at each series' ratio (measured / predicted, in logarithms): how much it spreads
(max - min), and how far the last round's lies from the *reference* ratio (the median
ratio of the recent rounds in which both series agreed within :data:`AGREE`; 1 before
any did). The fresh estimates become the trusted rates when their ratios spread less by
:data:`MARGIN`, or spread about as little (within :data:`MARGIN`) and explain the last
round closer to the reference by :data:`MARGIN`. A link that reads slow while the rounds
keep their pace makes the fresh ratios jump, or drift from the reference, and is left
out; a link that really slows down slows the rounds too, which the fresh estimates follow
and the trusted ones do not, and is trusted one round later. When the rates change before
any round could be compared (a WAN already fluctuating at start-up), both series may be
steady, but only the fresh one lies near the reference. A round need not end to refute
the trusted rates: once the round in progress has lasted :data:`MARGIN` longer than they
predict (at the reference ratio) and the fresh estimates predict at least that long, the
fresh ones are trusted at once (:meth:`EstimateTrust.on_rounds` with ``now``): a drop is
acted on within the round it slowed down. Until then, planning (policy switches and
relays) sees the trusted rates. Stalls do not wait (:class:`~.awareness.LinkRates` marks
them; they are urgent, and planning sees them between ticks too). Links the policy in
force does not use cannot be checked, and are trusted with the rest when the rest agrees.

Pure logic; the round times (:attr:`~.rounds.RoundTracker.round_seen`) are passed in.
"""
from __future__ import annotations

import collections
import math
import statistics

from netstorm.geoserver.policy.tree import PolicyError

from .planning import predict_iteration_s
from .topology import Topology

__all__ = ["AGREE", "AGREED_ROUNDS", "EstimateTrust", "FIRST_ROUND", "MARGIN", "MIN_ROUNDS",
           "WINDOW", "predicted_s", "spread"]

WINDOW = 4               # rounds whose ratios are compared
MIN_ROUNDS = 3           # rounds measured before any verdict
MARGIN = math.log(1.1)   # the fresh ratios must do this much better (10%)
AGREE = math.log(1.25)   # both predictions this close: the round sets the reference
AGREED_ROUNDS = 8        # rounds whose agreed ratios make the reference (median)
FIRST_ROUND = 3          # earlier rounds are start-up (initial values, MXNet imports, and
                         # the first iteration's warm-up: round 1 opens with round 2)


def spread(window, column: int) -> float:
    """max - min of log(seconds / prediction) over the window's rounds. O(window)."""
    logs = [math.log(row[0] / row[column]) for row in window]
    return max(logs) - min(logs)


def predicted_s(policy, topology: Topology, model_bytes: float, chunk_bytes: float) -> float:
    """:func:`~.planning.predict_iteration_s`, or inf when the policy uses a link that is
    gone. O(prediction)."""
    try:
        return predict_iteration_s(policy, topology, model_bytes, chunk_bytes)
    except ValueError:
        return math.inf


def _judged_policy(policy_for_round, k: int):
    """The policy round ``k`` ran, or None when that round is not to be judged: its policy
    is forgotten (no round can use it any more), or ``k`` is its first round (a
    transition). O(policies)."""
    try:
        policy = policy_for_round(k)
    except PolicyError:
        return None
    return None if policy.start_round == k else policy


class EstimateTrust:
    """The rates planning may use (``trusted``, per direction) and the last rounds' times
    beside their two predictions. ``model_bytes``/``chunk_bytes``: what predictions are
    made for (any fixed size will do: only ratios are compared)."""

    def __init__(self, trusted: dict, model_bytes: float, chunk_bytes: float):
        self.trusted = dict(trusted)
        self.model_bytes, self.chunk_bytes = model_bytes, chunk_bytes
        self.window = collections.deque(maxlen=WINDOW)   # [seconds, trusted s, fresh s]
        self.agreed = collections.deque(maxlen=AGREED_ROUNDS)   # log ratios, both agreeing
        self.judged = FIRST_ROUND - 1               # the last round judged
        self._overdue_round = None                  # the round in progress already judged

    def view(self, fresh: Topology, stalled=()) -> Topology:
        """``fresh`` (the current estimates, stalls applied) with every direction not in
        ``stalled`` at its trusted rate. O(links)."""
        return fresh.with_rates({d: m for d, m in self.trusted.items()
                                 if fresh.link(*d) is not None and d not in stalled})

    def _predict(self, policy, topology: Topology) -> float:
        return predicted_s(policy, topology, self.model_bytes, self.chunk_bytes)

    def on_rounds(self, round_seen: dict, policy_for_round, fresh: Topology,
                  stalled=(), now: float = None) -> list:
        """Judge every round completed since the last call: ``round_seen`` maps a round to
        when it was first reported (a round is complete when the next one was seen);
        ``policy_for_round(k)`` is the policy round k ran; ``fresh``: the estimates now,
        ``stalled`` the directions stalled among them.
        The first round of a new policy (a transition) is not judged. Returns one
        JSON-ready record per round measured (its seconds, both predictions, and from
        :data:`MIN_ROUNDS` rounds on both spreads and whether the fresh estimates became
        the trusted ones). With ``now`` (the clock of ``round_seen``), the round in
        progress is also checked for having outlasted the trusted rates (module
        docstring). O(new rounds · (prediction + window))."""
        stalled = frozenset(stalled)
        records = []
        for k in sorted(r for r in round_seen if r > self.judged and r + 1 in round_seen):
            self.judged = k
            policy = _judged_policy(policy_for_round, k)
            if policy is None:
                continue
            seconds = round_seen[k + 1] - round_seen[k]
            predicted = self._predict(policy, fresh)
            trusted = self._predict(policy, self.view(fresh, stalled))
            if not (seconds > 0 and predicted < math.inf and trusted < math.inf):
                continue
            self.window.append([seconds, trusted, predicted])
            if abs(math.log(predicted / trusted)) <= AGREE:
                self.agreed.append(math.log(seconds / trusted))
            record = {"event": "trust", "round": k, "seconds": round(seconds, 3),
                      "predicted_trusted_s": round(trusted, 4),
                      "predicted_fresh_s": round(predicted, 4)}
            if len(self.window) >= MIN_ROUNDS:
                was, fits = spread(self.window, 1), spread(self.window, 2)
                reference = self._reference()
                far, near = (abs(math.log(seconds / x) - reference)
                             for x in (trusted, predicted))
                adopt = fits + MARGIN < was or (fits <= was + MARGIN and near + MARGIN < far)
                record.update(spread_trusted=round(was, 4), spread_fresh=round(fits, 4),
                              off_trusted=round(far, 4), off_fresh=round(near, 4),
                              trusted=adopt)
                if adopt:
                    self._adopt(fresh, stalled)
            records.append(record)
        if now is not None:
            records += self._overdue(round_seen, policy_for_round, fresh, stalled, now)
        return records

    def _reference(self) -> float:
        return statistics.median(self.agreed) if self.agreed else 0.0

    def _adopt(self, fresh: Topology, stalled) -> None:
        self.trusted.update((d, m) for d, m in fresh.rates().items()
                            if d not in stalled)           # (a stall is no rate to keep)
        for row in self.window:                           # what the trusted rates predicted
            row[1] = row[2]

    def _overdue(self, round_seen: dict, policy_for_round, fresh: Topology, stalled,
                 now: float):
        """[a record] when the round in progress outlasted the trusted rates and the fresh
        estimates explain it (they are then trusted), else []. O(prediction)."""
        k = max(round_seen, default=0)
        if len(self.window) < MIN_ROUNDS or k < FIRST_ROUND or k == self._overdue_round:
            return []
        policy = _judged_policy(policy_for_round, k)
        if policy is None:
            return []
        elapsed = now - round_seen[k]
        factor = math.exp(self._reference())
        trusted = self._predict(policy, self.view(fresh, stalled))
        if not elapsed > trusted * factor * math.exp(MARGIN):
            return []
        predicted = self._predict(policy, fresh)
        if not elapsed <= predicted * factor < math.inf:
            return []
        self._overdue_round = k
        self._adopt(fresh, stalled)
        return [{"event": "trust", "round": k, "overdue_s": round(elapsed, 3),
                 "predicted_trusted_s": round(trusted, 4),
                 "predicted_fresh_s": round(predicted, 4), "trusted": True}]

    def forget(self, dc: str, declared: dict) -> None:
        """``dc``'s server was replaced: its links are back at ``declared`` rates. O(links)."""
        for d in self.trusted:
            if dc in d:
                self.trusted[d] = declared[d]
