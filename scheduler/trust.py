"""Which link estimates the planner may act on: those that explain what the rounds took.

A passive estimate can be wrong for reasons no single window shows: a receiver or sender
that was descheduled, a sender that could not keep its link busy (CPU, not the link), a
first window in slow start. Acting on one costs: on static paper9 with delays, re-planning
on such readings made ``netstorm-aware`` 0.89-0.92x as fast as frozen ``netstorm-fapt``;
on hetero6 one link read at 55% of its rate made the policy in force look 73% slower
than it was, and ``netstorm-full`` switched away from it (docs/awareness.md).

The scheduler sees what matters: how long each round took. :class:`EstimateTrust`
calibrates the time model against the rounds (the median, over the last
:data:`CALIBRATION_ROUNDS`, of a round's seconds over the prediction of the policy it ran
under the trusted rates; from :data:`MIN_CALIBRATION` rounds on, so that a warm-up round
does not set it) and, after every completed round, trusts the fresh estimates only
when, so calibrated, they predict that round within :data:`TRUST_TOLERANCE`. A link that
reads slow while the rounds that cross it do not slow down is a slow reading, not a slow
link; a link that really slowed down slows the rounds too, and is trusted after one round.
Until then, planning (policy switches and relays) sees the trusted rates. Stalls do not
wait (:class:`~.awareness.LinkRates` marks them; they are urgent). Links the policy in
force does not use cannot be checked and are trusted with the rest when the rest agrees.

Pure logic; the round times (:attr:`~.rounds.RoundTracker.round_seen`) are passed in.
"""
from __future__ import annotations

import collections
import statistics

from netstorm.geoserver.tree import PolicyError

from .planning import predict_iteration_s
from .topology import Topology

CALIBRATION_ROUNDS = 8   # rounds in the model's calibration (median)
MIN_CALIBRATION = 3      # rounds measured before any is judged (one may be a warm-up)
TRUST_TOLERANCE = 0.25   # fresh estimates are trusted when they predict the last round this close
FIRST_ROUND = 2          # earlier rounds are start-up (initial values, MXNet imports)


class EstimateTrust:
    """The rates planning may use (``trusted``, per direction) and the model's calibration.
    ``model_bytes``/``chunk_bytes``: what predictions are made for (any fixed size will do:
    the calibration absorbs it)."""

    def __init__(self, trusted: dict, model_bytes: float, chunk_bytes: float):
        self.trusted = dict(trusted)
        self.model_bytes, self.chunk_bytes = model_bytes, chunk_bytes
        self.ratios = collections.deque(maxlen=CALIBRATION_ROUNDS)
        self.judged = FIRST_ROUND - 1               # the last round judged
        self.stalled = frozenset()                  # directions stalled at the last call

    def view(self, fresh: Topology) -> Topology:
        """``fresh`` (the current estimates, stalls applied) with every direction that is not
        stalled at its trusted rate. O(links)."""
        return fresh.with_rates({d: m for d, m in self.trusted.items()
                                 if fresh.link(*d) is not None and d not in self.stalled})

    def _predict(self, policy, topology: Topology) -> float:
        try:
            return predict_iteration_s(policy, topology, self.model_bytes, self.chunk_bytes)
        except ValueError:          # the policy uses a link that is gone
            return float("inf")

    def on_rounds(self, round_seen: dict, policy_for_round, fresh: Topology,
                  stalled=()) -> list:
        """Judge every round completed since the last call: ``round_seen`` maps a round to
        when it was first reported (a round is complete when the next one was seen);
        ``policy_for_round(k)`` is the policy round k ran; ``fresh``: the estimates now.
        The first round of a new policy (a transition) is not judged. Returns one
        JSON-ready record per round measured (its seconds, both predictions, and from
        :data:`MIN_CALIBRATION` rounds on the calibration and whether the fresh estimates
        became the trusted ones). O(new rounds · prediction)."""
        self.stalled = frozenset(stalled)
        records = []
        for k in sorted(r for r in round_seen if r > self.judged and r + 1 in round_seen):
            self.judged = k
            try:
                policy = policy_for_round(k)
            except PolicyError:             # forgotten: no round can use it any more
                continue
            if policy.start_round == k:
                continue
            seconds = round_seen[k + 1] - round_seen[k]
            if not seconds > 0:
                continue
            predicted = self._predict(policy, fresh)
            trusted = self._predict(policy, self.view(fresh))
            record = {"event": "trust", "round": k, "seconds": round(seconds, 3),
                      "predicted_trusted_s": round(trusted, 4),
                      "predicted_fresh_s": round(predicted, 4)}
            if len(self.ratios) >= MIN_CALIBRATION:
                calibration = statistics.median(self.ratios)
                agrees = abs(predicted * calibration - seconds) <= TRUST_TOLERANCE * seconds
                record.update(calibration=round(calibration, 4), trusted=agrees)
                if agrees:                  # (a stall is no rate to keep)
                    self.trusted.update((d, m) for d, m in fresh.rates().items()
                                        if d not in self.stalled)
                    trusted = predicted
            if 0 < trusted < float("inf"):
                self.ratios.append(seconds / trusted)
            records.append(record)
        return records

    def forget(self, dc: str, declared: dict) -> None:
        """``dc``'s server was replaced: its links are back at ``declared`` rates. O(links)."""
        for d in self.trusted:
            if dc in d:
                self.trusted[d] = declared[d]
