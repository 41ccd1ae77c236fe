"""MixedExchange: mixed synchronization under random delays, without sockets."""
import random
from collections import deque

import numpy as np
import pytest

from netstorm.geoserver.server.mixed_sync import MixedError, MixedExchange
from netstorm.geoserver.policy.tree import Tree

DCS = ("a", "b", "c", "d")
TREE = Tree("a", {"a": None, "b": "a", "c": "b", "d": "a"})    # a chain b-c hangs off a
KEY = 7


class Cluster:
    """One MixedExchange per DC on FIFO links; applying an update adds it (so every
    replica must end at the same sum whatever the order) and records what it was
    compensated against."""

    def __init__(self, staleness, rng):
        self.rng = rng
        self.links: dict = {}
        self.then: list = []            # (dc, origin, round, w_then) of each apply
        self.weights = {dc: np.zeros(1) for dc in DCS}
        self.answered = dict.fromkeys(DCS, 0)
        self.ex = {dc: MixedExchange(dc, DCS, staleness, TREE.children_from,
                                     self._sender(dc), self._applier(dc)) for dc in DCS}
        for dc in DCS:
            self.ex[dc].keep_log = True
            self.ex[dc].begin(KEY, self.weights[dc])

    def _sender(self, src):
        def send(dst, key, rnd, origin, array):
            self.links.setdefault((src, dst), deque()).append((key, rnd, origin, array))
        return send

    def _applier(self, dc):
        def apply(key, grad, then):
            self.then.append((dc, then))
            self.weights[dc] = self.weights[dc] + grad      # as KeyStore keeps its value
            return self.weights[dc]
        return apply

    def local_round(self, dc):
        rnd = self.ex[dc].state(KEY).own + 1
        grad = np.array([float(DCS.index(dc) * 1000 + rnd)])
        self.weights[dc] = self.ex[dc].on_local(KEY, rnd, grad, self.weights[dc])

    def deliver(self, link):
        src, dst = link
        key, rnd, origin, array = self.links[link].popleft()
        self.weights[dst] = self.ex[dst].on_remote(key, rnd, origin, src, array,
                                                   self.weights[dst])

    def answer(self, dc):
        """What the DC's workers got: pulls up to the answerable round."""
        self.answered[dc] = self.ex[dc].answerable(KEY)


@pytest.mark.parametrize("staleness", [0, 1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_no_dc_ever_runs_more_than_staleness_rounds_ahead_under_random_delays(staleness,
                                                                               seed):
    rng = random.Random(seed)
    cluster = Cluster(staleness, rng)
    rounds, slow = 25, rng.choice(DCS)      # one DC computes four times slower
    while True:
        ready = [dc for dc in DCS if cluster.ex[dc].state(KEY).own == cluster.answered[dc]
                 < rounds]
        busy = [link for link, q in cluster.links.items() if q]
        if not ready and not busy:
            break
        events = [("link", l) for l in busy] + \
            [("round", dc) for dc in ready for _ in range(1 if dc == slow else 4)]
        what, arg = rng.choice(events)
        if what == "link":
            cluster.deliver(arg)
        else:
            cluster.local_round(arg)
        for dc in DCS:
            cluster.answer(dc)
            # the bound, from the recorded rounds: what this DC's workers were given never
            # runs more than `staleness` rounds ahead of any DC's own rounds
            for other in DCS:
                assert cluster.answered[dc] <= cluster.ex[other].state(KEY).own + staleness
    assert all(cluster.answered[dc] == rounds for dc in DCS), cluster.answered
    total = sum(DCS.index(dc) * 1000 + r for dc in DCS for r in range(1, rounds + 1))
    for dc in DCS:
        ex = cluster.ex[dc]
        assert cluster.weights[dc][0] == total      # every update applied, once
        applied = [(o, r) for _, o, r, _ in ex.applied_log]
        assert sorted(applied) == sorted((o, r) for o in DCS for r in range(1, rounds + 1))
        for origin in DCS:      # in each origin's order
            assert [r for o, r in applied if o == origin] == list(range(1, rounds + 1))
        assert ex.staleness_seen <= staleness + 1   # a DC's own round may come in between
        assert len(ex.state(KEY).snapshots) <= staleness + 3    # old snapshots are dropped


def test_compensation_uses_the_weights_after_the_receivers_round_before():
    """b's round q was computed on b's weights after its round q - 1; a compensates it
    against its own weights right after its own round q - 1."""
    cluster = Cluster(3, random.Random(0))
    initial, after = cluster.weights["a"], {}
    for rnd in (1, 2, 3):
        cluster.local_round("a")            # a: rounds 1..3 before b's first arrives
        after[rnd] = cluster.weights["a"]
    cluster.then.clear()
    for _ in (1, 2):
        cluster.local_round("b")
        cluster.deliver(("b", "a"))
    at_a = [then for dc, then in cluster.then if dc == "a"]
    assert len(at_a) == 2 and at_a[0] is initial and at_a[1] is after[1]
    assert [log[1:] for log in cluster.ex["a"].applied_log[-2:]] == [("b", 1, 3), ("b", 2, 2)]


def test_updates_it_cannot_take_are_refused_with_the_reason():
    cluster = Cluster(1, random.Random(0))
    ex = cluster.ex["c"]                    # c hears a's updates from b only
    one = np.ones(1)
    with pytest.raises(MixedError, match="d does not pass a's updates to c"):
        ex.on_remote(KEY, 1, "a", "d", one, cluster.weights["c"])
    with pytest.raises(MixedError, match="origin 'c' is not another DC"):
        ex.on_remote(KEY, 1, "c", "b", one, cluster.weights["c"])
    with pytest.raises(MixedError, match="origin 'zz' is not another DC"):
        ex.on_remote(KEY, 1, "zz", "b", one, cluster.weights["c"])
    ex.on_remote(KEY, 1, "a", "b", one, cluster.weights["c"])
    with pytest.raises(MixedError, match="round 1 of a already received"):
        ex.on_remote(KEY, 1, "a", "b", one, cluster.weights["c"])
    with pytest.raises(MixedError, match="more than 64 ahead"):
        ex.on_remote(KEY, 99, "a", "b", one, cluster.weights["c"])
    with pytest.raises(MixedError, match="own round 3 after 0"):
        ex.on_local(KEY, 3, one, cluster.weights["c"])


def test_what_an_origin_can_make_a_dc_keep_is_bounded():
    cluster = Cluster(0, random.Random(0))
    ex = cluster.ex["d"]
    ex.held_bytes = 16                      # two updates of one float64
    for rnd in (3, 2):                      # round 1 missing: both kept
        ex.on_remote(KEY, rnd, "a", "a", np.ones(1), cluster.weights["d"])
    with pytest.raises(MixedError, match="16 bytes are already kept for a"):
        ex.on_remote(KEY, 4, "a", "a", np.ones(1), cluster.weights["d"])
    ex.on_remote(KEY, 1, "a", "a", np.ones(1), cluster.weights["d"])    # not kept: applied
    assert ex.state(KEY).remote["a"] == 3 and ex.held["a"] == 0


def test_updates_kept_before_the_optimizer_is_set_are_applied_in_order_later():
    cluster = Cluster(0, random.Random(0))
    ex = cluster.ex["d"]
    w = ex.on_remote(KEY, 2, "a", "a", np.full(1, 20.0), np.zeros(1), can_apply=False)
    w = ex.on_remote(KEY, 1, "a", "a", np.full(1, 10.0), w, can_apply=False)
    assert w[0] == 0 and ex.state(KEY).remote["a"] == 0
    assert ex.catch_up(KEY, w)[0] == 30.0
    assert [r for _, _, r, _ in ex.applied_log] == [1, 2]
