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
        self.decisions = []
        policies = PolicyBook(star_policy(list(DCS), "a"))
        self.stores = {dc: KeyStore(
            dc, WORKERS[dc], 1 << 20, policies,
            reply=lambda w, m, dc=dc: self.replies[dc].append((w, m)),
            contribute=lambda cid, a, where, dc=dc: self._contribute(dc, cid, a),
            forward_init=lambda e, g: None, sync=sync, all_workers=6,
            quorum_ready=lambda rnd, dc=dc: self._ready(dc, rnd)) for dc in DCS}
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

    def _ready(self, dc, rnd):
        self._decide(self.scheduler.ready(dc, rnd, self.now))

    def _decide(self, decisions):
        for decision in decisions:
            self.decisions.append(decision)
            for store in self.stores.values():
                store.mode.quorum.decided(decision.round, decision.weights)

    def tick(self, seconds):
        self.now += seconds
        self._decide(self.scheduler.due(self.now))

    def push(self, dc, rnd, deltas):
        for w, delta in zip(WORKERS[dc], deltas):
            self.stores[dc].on_push(push_message(w, 0, rnd, np.asarray(delta, np.float32),
                                                 request=100 + rnd))

    def values(self, dc):
        """What the DC's workers were last answered."""
        return [m.arrays()[0].tolist() for _, m in self.replies[dc] if m.kind == Kind.VALUE]

    def replica(self, dc):
        return self.stores[dc].keys[0].value


def deltas(scale):
    """Two workers' deltas, told apart by ``scale``."""
    return np.array([[scale, 0, 1], [0, scale, 1]], np.float32)


def test_quorum_round_with_a_late_dc_applies_its_update_exactly_once_diloco():
    """diloco, plain outer step (lr 1, momentum 0: w += the weighted average delta). Round
    2 completes with a and b (weight 4); c's two workers push it late (one before the
    window closes, one after) and are answered with round 2's weights; round 3 carries
    c's round-2 deltas with weight 4: 8 in all."""
    sync = SyncConfig(mode="diloco", h=2, outer_lr=1.0, outer_momentum=0.0, quorum=2,
                      grace_s=GRACE_S)
    c = Cluster(sync)
    w = np.arange(3, dtype=np.float32)
    for dc, scale in zip(DCS, (2, 4, 6)):
        c.push(dc, 1, deltas(scale))
    assert [d.weights for d in c.decisions] == [{"a": 2, "b": 2, "c": 2}]
    w = w + sum(np.sum(deltas(s), axis=0) for s in (2, 4, 6)) / 6
    assert all(np.array_equal(c.replica(dc), w) for dc in DCS)

    c.push("a", 2, deltas(8))
    c.push("b", 2, deltas(16))
    c.stores["c"].on_push(push_message(31, 0, 2, np.float32([64, 0, 1]), request=102))
    assert len(c.decisions) == 1                    # the window is open
    c.tick(GRACE_S + 0.1)                           # ... and closes without c
    assert c.decisions[-1].weights == {"a": 2, "b": 2}
    c.stores["c"].on_push(push_message(32, 0, 2, np.float32([0, 64, 1]), request=102))
    w = w + (np.sum(deltas(8), axis=0) + np.sum(deltas(16), axis=0)) / 4
    assert all(np.array_equal(c.replica(dc), w) for dc in DCS)
    assert c.values("c")[-2:] == [w.tolist()] * 2   # late workers get the newest weights

    for dc, scale in zip(DCS, (32, 32, 32)):
        c.push(dc, 3, deltas(scale))
    assert c.decisions[-1].weights == {"a": 2, "b": 2, "c": 4}
    late = np.sum(deltas(64), axis=0)
    w = w + (3 * np.sum(deltas(32), axis=0) + late) / 8
    for dc in DCS:
        assert c.replica(dc).tobytes() == w.tobytes()
    assert c.stores["c"].mode.quorum.carry == {}    # merged once, nothing left over
    assert c.stores["c"].mode.quorum.merged == 1
    assert all(not s.keys[0].rounds for s in c.stores.values())


def test_quorum_outer_nesterov_replicas_stay_bit_identical_and_follow_the_formula():
    """DiLoCo's defaults (lr 0.7, momentum 0.9); c late in rounds 2 and 3, back in 4
    (weight 2 x 3). The replicas agree bit for bit; the result follows the outer Nesterov
    step on the weighted averages, computed here with numpy."""
    sync = SyncConfig(mode="diloco", h=2, quorum=2, grace_s=GRACE_S)
    c = Cluster(sync, size=5)
    rng = np.random.default_rng(7)
    pushes = {(dc, r): rng.standard_normal((2, 5)).astype(np.float32)
              for dc in DCS for r in range(1, 5)}
    w = np.arange(5, dtype=np.float32)
    b = None
    lr, m = np.float32(0.7), np.float32(0.9)
    plan = {1: DCS, 2: ("a", "b"), 3: ("a", "b"), 4: DCS}
    for rnd, members in plan.items():
        for dc in members:
            c.push(dc, rnd, pushes[dc, rnd])
        c.tick(GRACE_S + 0.1)
        if "c" not in members:
            c.push("c", rnd, pushes["c", rnd])      # late: carried
        weight = {dc: 2 * (1 if dc != "c" or rnd < 4 else 3) for dc in members}
        assert c.decisions[-1].weights == weight
        total = sum(pushes[dc, rnd].sum(axis=0) for dc in members)
        if rnd == 4:
            total = total + pushes["c", 2].sum(axis=0) + pushes["c", 3].sum(axis=0)
        g = -total / sum(weight.values())
        b = g if b is None else m * b + g
        w = w - lr * (g + m * b)
        replicas = [c.replica(dc).tobytes() for dc in DCS]
        assert replicas.count(replicas[0]) == 3
        np.testing.assert_allclose(c.replica("a"), w, rtol=1e-5, atol=1e-6)


def test_quorum_hfa_carries_a_late_dcs_local_rounds_into_its_next_wan_round():
    """hfa, k2 = 2: DC round 1 is local, round 2 crosses the WAN. c is left out of WAN
    round 1: its local progress and its late round-2 deltas join WAN round 2 with weight 4."""
    sync = SyncConfig(mode="hfa", k2=2, quorum=2, grace_s=GRACE_S)
    c = Cluster(sync)
    w = np.arange(3, dtype=np.float32)
    for dc in DCS:
        c.push(dc, 1, deltas(2))                     # local rounds: mean (1, 1, 1) each
    for dc in ("a", "b"):
        c.push(dc, 2, deltas(4))
    c.tick(GRACE_S + 0.1)
    assert c.decisions[-1].weights == {"a": 2, "b": 2}
    c.push("c", 2, deltas(8))                        # late
    w1 = w + (2 * 2 * np.float32([1, 1, 1]) + 2 * np.sum(deltas(4), axis=0)) / 4
    assert all(np.array_equal(c.replica(dc), w1) for dc in DCS)
    for dc in DCS:
        c.push(dc, 3, deltas(2))
        c.push(dc, 4, deltas(4))
    assert c.decisions[-1].weights == {"a": 2, "b": 2, "c": 4}
    c_missed = 2 * np.float32([1, 1, 1]) + np.sum(deltas(8), axis=0)
    own = 2 * np.float32([1, 1, 1]) + np.sum(deltas(4), axis=0)
    w2 = w1 + (3 * own + c_missed) / 8
    for dc in DCS:
        assert c.replica(dc).tobytes() == w2.tobytes()


def test_quorum_a_push_of_a_round_not_left_out_still_needs_the_previous_value():
    sync = SyncConfig(mode="diloco", h=2, quorum=2, grace_s=GRACE_S)
    c = Cluster(sync)
    c.push("a", 1, deltas(1))
    with pytest.raises(RequestError, match="pushes round 2 only after it received round 1"):
        c.stores["a"].on_push(push_message(11, 0, 2, np.float32([1, 1, 1])))


def test_without_a_quorum_callback_the_modes_behave_as_before():
    """Quorum set in the config but no ``quorum_ready`` (quorum = every DC): no quorum."""
    store = KeyStore("a", [11], 1 << 20, PolicyBook(star_policy(list(DCS), "a")),
                     reply=lambda w, m: None, contribute=lambda *a: None,
                     forward_init=lambda e, g: None,
                     sync=SyncConfig(mode="diloco", quorum=2))
    assert store.mode.quorum is None
