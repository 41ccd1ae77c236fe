"""geoserver/server/quorum_rounds.py with scheduler/quorum.py: quorum rounds of three DCs'
KeyStores in one process, no sockets. The WAN is played by summing every DC's contribution
of a chunk in DC order and delivering the same array to every DC (what the trees do); the
scheduler by a :class:`QuorumRounds` on a fake clock."""
import numpy as np
import pytest

from netstorm.geoserver.config.sync import SyncConfig
from netstorm.geoserver.core.wire import Kind
from netstorm.geoserver.policy.tree import PolicyBook
from netstorm.geoserver.server.local_store import KeyStore, RequestError
from netstorm.scheduler.policy import star_policy
from netstorm.scheduler.quorum import QuorumRounds
from tests.fakes import init_message, push_message

DCS = ("a", "b", "c")
WORKERS = {"a": (11, 12), "b": (21, 22), "c": (31, 32)}
GRACE_S = 1.0


class Cluster:
    """Three DCs of two workers each; ``min_dcs`` DCs make a quorum."""

    def __init__(self, sync: SyncConfig, min_dcs=2, size=3):
        self.sync, self.size = sync, size
        self.now = 0.0
        self.scheduler = QuorumRounds({dc: 2 for dc in DCS}, min_dcs, grace_s=GRACE_S)
        self.sums: dict = {}         # (key, chunk, wan round) -> {dc: contribution}
        self.replies = {dc: [] for dc in DCS}
        self.decisions, self.offers = [], []
        policies = PolicyBook(star_policy(list(DCS), "a"))
        self.stores = {dc: KeyStore(
            dc, WORKERS[dc], 1 << 20, policies,
            reply=lambda w, m, dc=dc: self.replies[dc].append((w, m)),
            contribute=lambda cid, a, where, dc=dc: self._contribute(dc, cid, a),
            forward_init=lambda e, g: None, sync=sync, all_workers=6,
            quorum_ready=lambda rnd, through, dc=dc: self._ready(dc, rnd, through))
            for dc in DCS}
        start = np.arange(size, dtype=np.float32)
        for dc in DCS:
            for w in WORKERS[dc]:
                value = start if w == WORKERS[dc][0] else None
                self.stores[dc].on_init(init_message(w, 0, value, (size,), 1, request=1))
            self.replies[dc].clear()

    def _contribute(self, dc, cid, array):
        parts = self.sums.setdefault((cid.key, cid.chunk, cid.rnd), {})
        assert dc not in parts, f"{dc} contributed {cid} twice"
        parts[dc] = np.array(array)
        if len(parts) == len(DCS):
            total = parts["a"] + parts["b"] + parts["c"]
            for store in self.stores.values():
                store.deliver(cid.key, cid.chunk, cid.rnd, total)

    def _ready(self, dc, rnd, through):
        self.offers.append((dc, rnd, through))
        self._decide(self.scheduler.ready(dc, rnd, self.now, through))

    def _decide(self, decisions):
        for decision in decisions:
            self.decisions.append(decision)
            for store in self.stores.values():
                store.mode.quorum.decided_round(decision.round, decision.weights)

    def tick(self, seconds):
        self.now += seconds
        self._decide(self.scheduler.due(self.now))

    def push(self, dc, rnd, deltas):
        for w, delta in zip(WORKERS[dc], deltas):
            self.stores[dc].on_push(push_message(w, 0, rnd, np.asarray(delta, np.float32),
                                                 request=100 + rnd))

    def offered(self, dc):
        """The DC's latest offer: (DC, WAN round, through)."""
        return [o for o in self.offers if o[0] == dc][-1]

    def values(self, dc):
        """What the DC's workers were last answered."""
        return [m.arrays()[0].tolist() for _, m in self.replies[dc] if m.kind == Kind.VALUE]

    def replica(self, dc):
        return self.stores[dc].keys[0].value


def deltas(scale):
    """Two workers' deltas, told apart by ``scale``."""
    return np.array([[scale, 0, 1], [0, scale, 1]], np.float32)


def summed(*arrays):
    total = arrays[0].sum(axis=0)
    for a in arrays[1:]:
        total = total + a.sum(axis=0)
    return total


def test_quorum_round_with_a_late_dc_applies_its_update_exactly_once_diloco():
    """diloco, plain outer step (lr 1, momentum 0: w += the weighted average delta).
    Round 2 completes with a and b (weight 4): c's workers push it late (one before the
    window closes, one after) and are answered at once with round 2's weights; c offers
    its round 2 for WAN round 3 (weight 2), then catches up: it offers its round 3 for WAN
    round 4 and raises the offer with its round 4 before round 4 is decided (weight 4).
    Every push is in the result exactly once."""
    sync = SyncConfig(mode="diloco", h=2, outer_lr=1.0, outer_momentum=0.0, quorum=2,
                      grace_s=GRACE_S)
    c = Cluster(sync)
    w = np.arange(3, dtype=np.float32)
    for dc, scale in zip(DCS, (2, 4, 6)):
        c.push(dc, 1, deltas(scale))
    assert [d.weights for d in c.decisions] == [{"a": 2, "b": 2, "c": 2}]
    w = w + summed(deltas(2), deltas(4), deltas(6)) / 6
    assert all(np.array_equal(c.replica(dc), w) for dc in DCS)

    c.push("a", 2, deltas(8))
    c.push("b", 2, deltas(16))
    c.stores["c"].on_push(push_message(31, 0, 2, np.float32([64, 0, 1]), request=102))
    assert len(c.decisions) == 1                    # the window is open
    c.tick(GRACE_S + 0.1)                           # ... and closes without c
    assert c.decisions[-1].weights == {"a": 2, "b": 2}
    c.stores["c"].on_push(push_message(32, 0, 2, np.float32([0, 64, 1]), request=102))
    w = w + summed(deltas(8), deltas(16)) / 4
    assert all(np.array_equal(c.replica(dc), w) for dc in DCS)
    assert c.values("c")[-2:] == [w.tolist()] * 2   # late workers get the newest weights
    assert c.offered("c") == ("c", 3, 2)              # its round 2, for WAN round 3

    c.push("a", 3, deltas(32))
    c.push("b", 3, deltas(32))
    assert len(c.decisions) == 2                    # c is behind: it may catch up ...
    c.tick(GRACE_S + 0.1)                           # ... but does not within the grace
    assert c.decisions[-1].weights == {"a": 2, "b": 2, "c": 2}
    w = w + summed(deltas(32), deltas(32), deltas(64)) / 6
    assert all(np.array_equal(c.replica(dc), w) for dc in DCS)

    c.push("c", 3, deltas(128))                     # behind: offers its round 3 ...
    assert c.offered("c") == ("c", 4, 3)
    c.push("c", 4, deltas(256))                     # ... and 4 too, before round 4 closes
    assert c.offered("c") == ("c", 4, 4)
    c.push("a", 4, deltas(32))
    c.push("b", 4, deltas(32))
    assert c.decisions[-1].weights == {"a": 2, "b": 2, "c": 4}
    w = w + summed(deltas(32), deltas(32), deltas(128), deltas(256)) / 8
    for dc in DCS:
        assert c.replica(dc).tobytes() == w.tobytes()
    quorum = c.stores["c"].mode.quorum
    assert quorum.pending == {0: {}} and not quorum.waiting and quorum.claimed == 4
    assert quorum.merged == 1 and quorum.left_out == 1
    assert all(not s.keys[0].rounds for s in c.stores.values())


def test_quorum_outer_nesterov_replicas_stay_bit_identical_and_follow_the_formula():
    """DiLoCo's defaults (lr 0.7, momentum 0.9). c is late in WAN round 2 and stays a
    round behind (WAN round r takes its round r - 1) until it pushes two rounds before
    round 6 is decided. The replicas agree bit for bit; the result follows the outer
    Nesterov step on the weighted averages."""
    sync = SyncConfig(mode="diloco", h=2, quorum=2, grace_s=GRACE_S)
    c = Cluster(sync, size=5)
    rng = np.random.default_rng(7)
    pushes = {(dc, r): rng.standard_normal((2, 5)).astype(np.float32)
              for dc in DCS for r in range(1, 7)}
    # WAN round -> (what c pushes before the others, what after the window, its weight)
    plan = {1: ((1,), (), 2), 2: ((), (2,), 0), 3: ((), (3,), 2), 4: ((), (4,), 2),
            5: ((), (), 2), 6: ((5, 6), (), 4)}
    merged = {1: (1,), 3: (2,), 4: (3,), 5: (4,), 6: (5, 6)}
    w = np.arange(5, dtype=np.float32)
    b = None
    lr, m = np.float32(0.7), np.float32(0.9)
    for rnd, (before, after, weight) in plan.items():
        for r in before:
            c.push("c", r, pushes["c", r])
        c.push("a", rnd, pushes["a", rnd])
        c.push("b", rnd, pushes["b", rnd])
        c.tick(GRACE_S + 0.1)
        for r in after:
            c.push("c", r, pushes["c", r])
        assert c.decisions[-1].round == rnd
        assert c.decisions[-1].weights.get("c", 0) == weight, (rnd, c.decisions[-1])
        total = pushes["a", rnd].sum(axis=0) + pushes["b", rnd].sum(axis=0)
        for r in merged.get(rnd, ()):
            total = total + pushes["c", r].sum(axis=0)
        g = -total / np.float32(4 + weight)
        b = g if b is None else m * b + g
        w = w - lr * (g + m * b)
        replicas = [c.replica(dc).tobytes() for dc in DCS]
        assert replicas.count(replicas[0]) == 3
        np.testing.assert_allclose(c.replica("a"), w, rtol=1e-5, atol=1e-6)
    assert not c.stores["c"].mode.quorum.pending[0]


def test_quorum_hfa_averages_the_deltas_a_late_dc_merges_with_its_weight():
    """hfa (k2 = 1): the WAN round sets the weights to the last round's plus the weighted
    average delta; c late in round 1, merged in round 2 with weight 2 x 1 (one round)."""
    sync = SyncConfig(mode="hfa", k1=3, quorum=2, grace_s=GRACE_S)
    c = Cluster(sync)
    w = np.arange(3, dtype=np.float32)
    c.push("a", 1, deltas(4))
    c.push("b", 1, deltas(4))
    c.tick(GRACE_S + 0.1)
    c.push("c", 1, deltas(8))
    w1 = w + summed(deltas(4), deltas(4)) / 4
    assert all(np.array_equal(c.replica(dc), w1) for dc in DCS)
    for dc in ("a", "b"):
        c.push(dc, 2, deltas(2))
    c.tick(GRACE_S + 0.1)
    assert c.decisions[-1].weights == {"a": 2, "b": 2, "c": 2}
    w2 = w1 + summed(deltas(2), deltas(2), deltas(8)) / 6
    for dc in DCS:
        assert c.replica(dc).tobytes() == w2.tobytes()


def test_quorum_a_push_ahead_of_the_wan_is_refused():
    sync = SyncConfig(mode="diloco", h=2, quorum=2, grace_s=GRACE_S)
    c = Cluster(sync)
    c.push("a", 1, deltas(1))
    with pytest.raises(RequestError, match="pushes round 2 only after it received round 1"):
        c.stores["a"].on_push(push_message(11, 0, 2, np.float32([1, 1, 1])))


def test_a_dc_left_out_while_a_key_is_still_pushing_contributes_it_once_complete():
    """Two keys: c's key 1 is complete when its offer is taken, key 0 only later; key 0's
    contribution waits for it, and the WAN round completes once it came."""
    sync = SyncConfig(mode="diloco", h=2, outer_lr=1.0, outer_momentum=0.0, quorum=3,
                      grace_s=GRACE_S)
    c = Cluster(sync)
    for dc in DCS:
        for worker in WORKERS[dc]:
            c.stores[dc].on_init(init_message(worker, 1, np.zeros(3, np.float32)
                                              if worker == WORKERS[dc][0] else None,
                                              (3,), 1, request=1))
    for dc in ("a", "b"):
        for key in (0, 1):
            for worker in WORKERS[dc]:
                c.stores[dc].on_push(push_message(worker, key, 1, np.ones(3, np.float32)))
    for worker in WORKERS["c"]:
        c.stores["c"].on_push(push_message(worker, 1, 1, np.ones(3, np.float32)))
    assert c.decisions[-1].weights == {"a": 2, "b": 2, "c": 2}
    assert c.stores["a"].keys[1].applied == 1 and c.stores["a"].keys[0].applied == 0
    assert c.stores["c"].mode.quorum.waiting == {0: [(1, 1, 1)]}
    for worker in WORKERS["c"]:
        c.stores["c"].on_push(push_message(worker, 0, 1, np.ones(3, np.float32)))
    assert all(s.keys[0].applied == 1 for s in c.stores.values())
    assert c.replica("a").tobytes() == c.replica("c").tobytes()


def test_without_a_quorum_callback_the_modes_behave_as_before():
    """Quorum set in the config but no ``quorum_ready`` (quorum = every DC): no quorum."""
    store = KeyStore("a", [11], 1 << 20, PolicyBook(star_policy(list(DCS), "a")),
                     reply=lambda w, m: None, contribute=lambda *a: None,
                     forward_init=lambda e, g: None,
                     sync=SyncConfig(mode="diloco", quorum=2))
    assert store.mode.quorum is None


def test_a_decision_out_of_order_or_weighing_rounds_not_offered_is_refused():
    sync = SyncConfig(mode="diloco", h=2, quorum=3, grace_s=GRACE_S)
    c = Cluster(sync)
    quorum = c.stores["a"].mode.quorum
    assert "round 2 decided after round 0" in quorum.refusal(2, {"b": 2})
    c.push("a", 1, deltas(1))
    assert quorum.refusal(1, {"a": 2, "b": 2}) == ""
    assert "weight 4 for a, which has 2 workers and offered rounds 1..1" in \
        quorum.refusal(1, {"a": 4})
    assert "weight 3" in quorum.refusal(1, {"a": 3})
    assert quorum.refusal(1, {"b": 2}) == ""         # left out: nothing to check
