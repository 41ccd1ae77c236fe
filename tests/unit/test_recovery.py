"""Recovery (docs/recovery.md). In process: geoserver/server/recovery.py, a lost DC server replaced
from a peer's replica while rounds are in flight, exactly. Live on loopback: a worker or a
server killed mid-training is restarted and the run ends exactly as an uninterrupted one.
Test names contain ``recover``."""

import importlib.util
import random
from types import SimpleNamespace

import mxnet as mx
import numpy as np
import pytest
from launching import WORKERS
from netstorm.geoserver.core.postoffice import AbortError
from netstorm.geoserver.core.wire import Flag, Kind, Message
from netstorm.geoserver.model.optimizer_host import optimizer_spec
from netstorm.geoserver.policy.tree import Policy, PolicyBook
from netstorm.geoserver.server.aggregation import TreeExchange
from netstorm.geoserver.server.local_store import KeyStore
from netstorm.geoserver.server.recovery import ServerRecovery
from netstorm.scheduler.policy import random_trees
from netstorm.scheduler.replacement import ServerReplacement

pytestmark = pytest.mark.usefixtures("dataplane")   # both data paths (conftest.py)

_spec = importlib.util.spec_from_file_location("recover_values", WORKERS / "recover_values.py")
_values = importlib.util.module_from_spec(_spec)

_spec.loader.exec_module(_values)       # the worker scripts' own gradients

OPTIMIZER, SHAPES, gradient = _values.OPTIMIZER, _values.SHAPES, _values.gradient
ROUNDS, WORKER_COUNT = 30, 4


def uninterrupted(rounds: int, workers: int) -> dict:
    """The weights MXNet's own updater reaches on the summed gradients."""
    updater = mx.optimizer.get_updater(mx.optimizer.create("sgd", **OPTIMIZER))
    weights = {key: mx.nd.ones(shape) for key, shape in SHAPES.items()}
    for rnd in range(1, rounds + 1):
        for key in SHAPES:
            total = sum(gradient(key, rnd, rank) for rank in range(workers))
            updater(key, mx.nd.array(total), weights[key])
    return {key: w.asnumpy() for key, w in weights.items()}


# ------------------------------------------------------------ in process (geoserver/server/recovery.py)
DCS, CHUNK_BYTES = ("a", "b", "c"), 16 << 10
SPEC = optimizer_spec(mx.optimizer.create("sgd", **OPTIMIZER))


class _Wan:
    """A DC's sends, onto the shared simulated network."""

    def __init__(self, net, dc, rates=None):
        self.net, self.dc = net, dc
        self.router = SimpleNamespace(rates=rates or {})

    def send(self, dc, msg):
        self.net.append((dc, self.dc, msg))

    def chunk(self, dc, kind, cid, array, encoded):
        self.net.append((dc, self.dc, (kind, cid, array, encoded)))

    def forget_before(self, version):
        return 0        # what was queued stays on the wire: the receivers must drop it


class _Po:
    def __init__(self):
        self.to_scheduler = []

    def send_scheduler(self, msg):
        self.to_scheduler.append(msg)


class _Dc:
    """One DC's server roles, as server.py wires them, and its one worker (rank = index)."""

    def __init__(self, name, rank, net, policy, replacing=False):
        self.name, self.rank, self.worker = name, rank, 100 + rank
        self.values: dict = {}           # key -> (round, value) the worker received
        self.policies = PolicyBook(None if replacing else policy)
        wan, self.po = _Wan(net, name), _Po()
        self.exchange = TreeExchange(name, self.policies, send=wan.chunk,
                                     deliver=lambda *a: self.store.deliver(*a))
        self.store = KeyStore(name, [self.worker], CHUNK_BYTES, self.policies,
                              reply=self._reply, contribute=self.exchange.contribute,
                              forward_init=lambda *a: None)
        self.recovery = ServerRecovery(name, self.store, self.exchange, wan, self.policies,
                                       self.po, DCS, replacing=replacing)

    def _reply(self, worker, msg):
        if msg.kind == Kind.VALUE:
            self.values[msg.key] = (msg.seq, msg.arrays()[0].copy())

    def start(self):
        for key, shape in SHAPES.items():
            self.store.on_init(Message(Kind.INIT, key=key, seq=1, sender=-1,
                                       flags=Flag.HAS_VALUE, dtype=np.float32,
                                       meta={"shape": list(shape), "dtype": "<f4"},
                                       frames=[np.ones(shape, np.float32).reshape(-1)]))
        self.store.on_set_optimizer(Message(Kind.SET_OPTIMIZER, sender=self.worker,
                                            meta={"spec": SPEC}))

    def push(self, key, rnd):
        grad = gradient(key, rnd, self.rank).reshape(-1)
        self.store.on_push(Message(Kind.PUSH, key=key, seq=rnd, sender=self.worker,
                                   flags=Flag.WANT_VALUE, dtype=np.float32, frames=[grad]))

    def done(self) -> int:
        """The rounds whose values of every key this DC's worker received."""
        return min(self.values.get(k, (0,))[0] for k in SHAPES)

    def take(self, src, item):
        if isinstance(item, Message) and item.kind == Kind.STATE_REQUEST:
            self.recovery.on_state_request(src, item)
        elif isinstance(item, Message):
            self.recovery.on_state(src, item)
        else:
            self.exchange.on_chunk(src, *item)


def _run(dcs, net, rng, until, steps=None):
    """Workers push each round once they hold the last one's values; the network delivers
    in random order. Stops at ``until`` rounds everywhere, or after ``steps`` deliveries."""
    while steps is None or steps > 0:
        for dc in dcs.values():
            nxt = dc.done() + 1
            keys = dc.store.keys
            if nxt <= until and all(keys[k].next_push.get(dc.worker, keys[k].applied + 1)
                                    == nxt for k in SHAPES):
                for key in SHAPES:
                    dc.push(key, nxt)
        if not net:
            return
        dst, src, item = net.pop(rng.randrange(len(net)))
        if dst in dcs and src in dcs:       # the lost server's traffic goes nowhere
            dcs[dst].take(src, item)
        steps = None if steps is None else steps - 1


def _replace(dcs, net, lost, rng, first=DCS):
    """What the scheduler and the launcher do when ``lost``'s server dies; the REPLAY
    reaches only the DCs in ``first`` (the test hands the others the returned one)."""
    survivors = [d for d in DCS if d != lost]
    latest = max(dcs[survivors[0]].policies.by_version)
    replacement = ServerReplacement(lost, survivors, deadline=1e9)
    for d in survivors:
        dcs[d].recovery.on_recover(Message(Kind.RECOVER, meta={"dc": lost,
                                                               "version": latest + 1}))
        report = dcs[d].po.to_scheduler.pop()
        replacement.report(d, report.meta["keys"])
    plan = replacement.make_plan()
    old = dcs[lost]
    new = dcs[lost] = _Dc(lost, old.rank, net, None, replacing=True)
    new.values = old.values             # the worker lives on
    trees = dcs[survivors[0]].policies.for_round(replacement.start_round).trees
    replay = Message(Kind.REPLAY, meta={
        "policy": Policy(latest + 1, replacement.start_round, trees).to_json(),
        "keys": [[k, r, list(holders), d] for k, (r, holders, d) in sorted(plan.items())]})
    for d in first:
        dcs[d].recovery.on_replay(replay)
    return old, plan, replay


def _resend(old, new):
    """The lost DC's worker asks the replacement how far it got, pushes the rest and pulls
    again what it waited for."""
    for key in SHAPES:
        have = new.store.keys[key].next_push.get(new.worker, new.store.keys[key].applied + 1)
        pushed = old.store.keys[key].next_push[old.worker] - 1
        for rnd in range(have, pushed + 1):
            new.push(key, rnd)
        if new.values[key][0] < pushed:
            new.store.on_pull(Message(Kind.PULL, key=key, seq=pushed, sender=new.worker))


@pytest.mark.parametrize("seed", range(24))
def test_recover_a_lost_server_in_process_from_a_peer_replica_exactly(seed):
    """Three DCs on random multi-root trees; dc b's server is lost at a random moment of a
    round (partial sums on its trees, totals half broadcast; a survivor may be a round
    behind on a key, b itself a round ahead). After the replacement every DC's replica,
    and every worker's values, equal an uninterrupted run's, bit for bit."""
    rng = random.Random(seed)
    trees, shares = random_trees(DCS, rng)
    policy = Policy(1, 1, tuple(trees), tuple(shares))
    net: list = []
    dcs = {d: _Dc(d, i, net, policy) for i, d in enumerate(DCS)}
    for dc in dcs.values():
        dc.start()
    _run(dcs, net, rng, until=4)
    _run(dcs, net, rng, until=ROUNDS, steps=rng.randrange(1, 150))
    assert net                          # mid-round
    applied = {d: [dcs[d].store.keys[k].applied for k in SHAPES] for d in DCS}
    old, plan, _ = _replace(dcs, net, "b", rng)
    assert dcs["b"].recovery.active and dcs["b"].recovery.awaiting
    _run(dcs, net, rng, until=0)        # copies only: no new pushes anywhere
    assert not any(dcs[d].recovery.active for d in DCS), applied
    _resend(old, dcs["b"])
    _run(dcs, net, rng, until=14)
    want = uninterrupted(14, len(DCS))
    for d in DCS:
        for key in SHAPES:
            np.testing.assert_array_equal(dcs[d].store.keys[key].value.reshape(SHAPES[key]),
                                          want[key], err_msg=f"{d} key {key} {applied}")
            assert dcs[d].values[key][0] == 14
            np.testing.assert_array_equal(dcs[d].values[key][1].reshape(SHAPES[key]),
                                          want[key])
    assert all(set(holders) <= {"a", "c"} for _, holders, _ in plan.values())


def test_recover_copies_each_key_over_the_fastest_link_into_the_copying_dc():
    """rate / (1 + keys already asked of it): 100; 55; 50; 33 > 30 > 27.5."""
    net: list = []
    wan = _Wan(net, "b", rates={("a", "b"): 30.0, ("c", "b"): 100.0, ("d", "b"): 55.0,
                                ("b", "a"): 999.0})
    recovery = ServerRecovery("b", None, None, wan, None, _Po(), ("a", "b", "c", "d"), True)
    asks: dict = {}
    for _ in range(4):
        asks.setdefault(recovery._source(["a", "b", "c", "d"], asks), []).append(0)
    assert {dc: len(keys) for dc, keys in asks.items()} == {"c": 3, "d": 1}
    with pytest.raises(AbortError, match="names no other DC"):
        recovery._source(["b", "zz"], asks)


def test_recover_refuses_a_replica_that_fails_its_digest():
    """A STATE whose value bytes differ from the digest its source reported is refused,
    naming the source; nothing is adopted."""
    rng = random.Random(3)
    net: list = []
    policy = Policy(1, 1, (random_trees(DCS, rng)[0][0],))
    dcs = {d: _Dc(d, i, net, policy) for i, d in enumerate(DCS)}
    for dc in dcs.values():
        dc.start()
    _run(dcs, net, rng, until=2)
    _replace(dcs, net, "b", rng)
    requests = [item for item in net if item[0] != "b"]
    assert requests and all(item[2].kind == Kind.STATE_REQUEST for item in requests)
    net.clear()
    for dst, src, item in requests:
        dcs[dst].take(src, item)
    dst, src, state = net[0]
    state.frames[0] = state.frames[0].copy()
    state.frames[0][5] ^= 1
    with pytest.raises(AbortError, match=f"refused the replica from {src}: key .* fails its "
                                         f"checksum"):
        dcs[dst].take(src, state)
    assert dcs["b"].recovery.awaiting and not dcs["b"].store.keys


def test_recover_refuses_a_peer_request_or_replica_that_does_not_fit(caplog):
    """A STATE_REQUEST the plan allows for a key not here is answered with nothing
    (logged), and an asked-for STATE whose key has another shape here is refused naming
    its source, before anything of it is taken; neither stops the server with anything
    but that error."""
    from netstorm.geoserver.server.replica import KeyReplica, digest, encode
    net: list = []
    rng = random.Random(5)
    policy = Policy(1, 1, (random_trees(DCS, rng)[0][0],))
    dcs = {d: _Dc(d, i, net, policy) for i, d in enumerate(DCS)}
    for dc in dcs.values():
        dc.start()
    dcs["a"].recovery.owed = {"b": {0, 77}}         # as if a plan had b copy them here
    dcs["a"].take("b", Message(Kind.STATE_REQUEST, meta={"keys": [0, 77]}))
    assert net == [] and "cannot send b the replica it asked for" in caplog.text
    value = np.zeros(4, np.float32)                 # key 0 is (6, 5) here
    meta, frames = encode([KeyReplica(1, 0, SHAPES[1], np.dtype(np.float32), False,
                                      np.zeros(SHAPES[1], np.float32).reshape(-1)),
                           KeyReplica(0, 0, (4,), np.dtype(np.float32), False, value)],
                          None, None)
    dcs["a"].recovery.awaiting = {0: (0, digest(value), "c"),       # asked of c
                                  1: (0, digest(np.zeros(SHAPES[1], np.float32)), "c")}
    before = dcs["a"].store.keys[1].value.copy()
    with pytest.raises(AbortError, match="refused the replica from c: key 0 was initialized "
                                         "as"):
        dcs["a"].take("c", Message(Kind.STATE, meta=meta, frames=frames))
    np.testing.assert_array_equal(dcs["a"].store.keys[1].value, before)   # nothing taken


def _trained(seed: int, until: int):
    """Three DCs on one random tree after ``until`` whole rounds (nothing in flight)."""
    rng = random.Random(seed)
    net: list = []
    policy = Policy(1, 1, (random_trees(DCS, rng)[0][0],))
    dcs = {d: _Dc(d, i, net, policy) for i, d in enumerate(DCS)}
    for dc in dcs.values():
        dc.start()
    _run(dcs, net, rng, until=until)
    assert not net
    return dcs, net, rng


def _deliver(dcs, net) -> list:
    """Deliver what is on the network now (not what that makes); what was delivered."""
    items, net[:] = list(net), []
    for dst, src, item in items:
        dcs[dst].take(src, item)
    return items


def _exact_after(dcs, net, rng, old, rounds: int) -> None:
    _resend(old, dcs["b"])
    _run(dcs, net, rng, until=rounds)
    want = uninterrupted(rounds, len(DCS))
    for d in DCS:
        for key in SHAPES:
            np.testing.assert_array_equal(dcs[d].store.keys[key].value.reshape(SHAPES[key]),
                                          want[key], err_msg=f"{d} key {key}")


def test_recover_drops_a_state_no_request_asked_for_and_goes_on(caplog):
    """Issue 34 (a): a STATE that answers no outstanding request of this DC's recovery -
    none at all, or the keys were asked of another DC, or it came already (late or twice) -
    is dropped and logged naming the peer; nothing of it is taken and the run goes on."""
    dcs, net, rng = _trained(11, until=2)
    meta, frames = dcs["b"].store.replicas.of([0, 1])     # b's own, true replica: unasked
    before = dcs["a"].store.keys[0].value.copy()
    dcs["a"].take("b", Message(Kind.STATE, meta=meta, frames=frames))
    assert "a: dropped STATE from b: no replica is awaited here" in caplog.text
    np.testing.assert_array_equal(dcs["a"].store.keys[0].value, before)
    old, _, _ = _replace(dcs, net, "b", rng)
    assert [(src, item.kind) for _, src, item in net] == [("b", Kind.STATE_REQUEST)] * 2
    _deliver(dcs, net)
    states = list(net)
    net.clear()
    (_, src, state), (_, other, _) = states
    dcs["b"].take(other, state)                         # right keys, from the wrong DC
    key = state.meta["keys"][0][0]
    assert f"b: dropped STATE from {other}: key {key} was not asked of {other}" in caplog.text
    assert dcs["b"].recovery.awaiting and not dcs["b"].store.keys
    for dst, src_, item in states:
        dcs[dst].take(src_, item)
    assert not dcs["b"].recovery.active and not net
    dcs["b"].take(src, state)                           # again, once recovered
    assert f"b: dropped STATE from {src}: no replica is awaited here" in caplog.text
    _exact_after(dcs, net, rng, old, rounds=4)


def test_recover_answers_a_state_request_only_as_the_recovery_planned(caplog):
    """Issue 34 (b): a server sends its replica only to a DC the current recovery's plan
    has copy those keys from it, once (a request that comes before its REPLAY waits for
    it); any other STATE_REQUEST - no recovery, a DC that holds the keys itself, a second
    one - is dropped and logged naming the peer, and answered with nothing."""
    dcs, net, rng = _trained(12, until=2)
    dcs["a"].take("b", Message(Kind.STATE_REQUEST, meta={"keys": [0, 1]}))
    assert net == [] and "a: dropped STATE_REQUEST from b: this server is in no recovery" \
        in caplog.text
    old, _, replay = _replace(dcs, net, "b", rng, first=("b",))    # a, c: REPLAY not here
    requests = _deliver(dcs, net)                       # b's requests: they wait for it
    assert {dst for dst, _, _ in requests} == {"a", "c"} and net == []
    for d in ("a", "c"):
        dcs[d].recovery.on_replay(replay)
    assert sorted((dst, item.kind) for dst, _, item in net) == [("b", Kind.STATE)] * 2
    _deliver(dcs, net)
    assert not any(dcs[d].recovery.active for d in DCS)
    for dst, src, item in requests:                     # asked again: sent already
        dcs[dst].take(src, item)
        assert net == [] and (f"{dst}: dropped STATE_REQUEST from b: key "
                              f"{item.meta['keys'][0]} is not one the plan has it copy "
                              f"from here, or was sent already") in caplog.text
    dcs["a"].take("c", Message(Kind.STATE_REQUEST, meta={"keys": [0]}))   # c holds key 0
    assert net == [] and "a: dropped STATE_REQUEST from c: key 0 is not one" in caplog.text
    _exact_after(dcs, net, rng, old, rounds=4)


# ------------------------------------------------------------ a replica audit's repair (docs/recovery-audit.md)
ODD_SPEC = optimizer_spec(mx.optimizer.create("sgd", **dict(OPTIMIZER, learning_rate=0.25)))


@pytest.mark.parametrize("seed", range(8))
def test_recover_an_odd_replica_from_the_majority_in_process_exactly(seed):
    """dc c's worker set another learning rate, so c's replica diverged. The audit's repair
    at a random moment of a round: every DC freezes and reports, c copies every key (and
    the majority's optimizer) from a and b, even at the round it applied itself, and every
    DC replays the rounds in flight. Every replica then equals a run where nobody diverged,
    bit for bit, and so do the digests the servers audit after it. c may have applied a
    round of a key that neither a nor b had (2 of these seeds): it puts the key back a
    round, copies it there, and sums that round again with the others."""
    from netstorm.geoserver.config.sync import SyncConfig
    from netstorm.geoserver.server.replica_digest import InlineHashing, ReplicaDigests
    rng = random.Random(seed)
    trees, shares = random_trees(DCS, rng)
    net: list = []
    dcs = {d: _Dc(d, i, net, Policy(1, 1, tuple(trees), tuple(shares)))
           for i, d in enumerate(DCS)}
    for dc in dcs.values():
        dc.start()
        dc.store.keep_applied = True        # as a server with server_restarts does
    odd = dcs["c"]
    odd.store.on_set_optimizer(Message(Kind.SET_OPTIMIZER, sender=odd.worker,
                                       meta={"spec": ODD_SPEC}))
    _run(dcs, net, rng, until=4)
    _run(dcs, net, rng, until=ROUNDS, steps=rng.randrange(1, 150))
    repair = ServerReplacement("c", DCS, deadline=1e9, odd=["c"])
    latest = max(dcs["a"].policies.by_version)
    for d in DCS:
        dcs[d].recovery.on_recover(Message(Kind.RECOVER, meta={
            "dc": "c", "version": latest + 1, "repair": True}))
        repair.report(d, dcs[d].po.to_scheduler.pop().meta["keys"])
    plan = repair.make_plan()
    trees = dcs["a"].policies.for_round(repair.start_round).trees
    replay = Message(Kind.REPLAY, meta={
        "policy": Policy(latest + 1, repair.start_round, trees).to_json(),
        "keys": [[k, r, list(holders), dg] for k, (r, holders, dg) in sorted(plan.items())]})
    for d in DCS:
        dcs[d].recovery.on_replay(replay)
    assert set(odd.recovery.awaiting) == set(SHAPES)        # every key, at any round
    _run(dcs, net, rng, until=0)
    assert not any(dcs[d].recovery.active for d in DCS)
    assert odd.store.spec == SPEC                           # the majority's optimizer
    for dc in dcs.values():
        dc.store.audit = ReplicaDigests(1, SyncConfig(), InlineHashing())
    _run(dcs, net, rng, until=14)
    want = uninterrupted(14, len(DCS))
    for d in DCS:
        for key in SHAPES:
            np.testing.assert_array_equal(dcs[d].store.keys[key].value.reshape(SHAPES[key]),
                                          want[key], err_msg=f"{d} key {key}")
    rows = {d: sorted(map(tuple, dcs[d].store.audit.take())) for d in DCS}
    assert rows["a"] and rows["a"] == rows["b"] == rows["c"]
