"""Recovery in every mode, in process (docs/recovery.md, geoserver/server/recovery.py): a lost
DC server replaced from a peer's replica under compression (error-feedback residuals rolled
back), under hfa, esync and diloco (the mode's own state copied with the replica), and two
servers lost at once. No sockets: DCs on random multi-root trees, messages delivered in a
random order, the loss at a random message of a round. Each run is compared, bit for bit,
with the same cluster run without a loss (exact sums: small integers)."""

import random

import numpy as np
import pytest
from netstorm.geoserver.compression.feedback import WanCodec
from netstorm.geoserver.config.compression import CompressionConfig
from netstorm.geoserver.config.sync import SyncConfig
from netstorm.geoserver.core.wire import Flag, Kind, Message
from netstorm.geoserver.policy.tree import Policy, PolicyBook
from netstorm.geoserver.server.aggregation import TreeExchange
from netstorm.geoserver.server.local_store import KeyStore
from netstorm.geoserver.server.recovery import ServerRecovery
from netstorm.scheduler.policy import random_trees
from netstorm.scheduler.replacement import RecoveryError, ServerReplacement

from unit.test_recovery import CHUNK_BYTES, SHAPES, SPEC, _Po, _resend, _run, _Wan, gradient

pytestmark = pytest.mark.usefixtures("dataplane")   # both data paths (conftest.py)

TWO_BIT = CompressionConfig(type="2bit", threshold=1.0)


class _ModeDc:
    """One DC's server roles (as server.py wires them) under ``sync``, with ``compression``
    (or none), and its one worker (rank = index); the interface tests/unit/test_recovery.py's
    ``_run`` and ``_resend`` drive."""

    def __init__(self, name, rank, net, policy, dcs, sync, compression=None,
                 replacing=False):
        self.name, self.rank, self.worker, self.sync = name, rank, 100 + rank, sync
        self.values: dict = {}
        self.policies = PolicyBook(None if replacing else policy)
        wan, self.po = _Wan(net, name), _Po()
        self.codec = compression and WanCodec(compression, seed=rank,
                                              max_elements=CHUNK_BYTES // 4, replayable=True)
        self.exchange = TreeExchange(name, self.policies, send=wan.chunk,
                                     deliver=lambda *a: self.store.deliver(*a),
                                     codec=self.codec)
        self.store = KeyStore(name, [self.worker], CHUNK_BYTES, self.policies,
                              reply=self._reply, contribute=self.exchange.contribute,
                              forward_init=lambda *a: None, sync=sync, all_workers=len(dcs))
        self.recovery = ServerRecovery(name, self.store, self.exchange, wan, self.policies,
                                       self.po, dcs, replacing=replacing)

    def _reply(self, worker, msg):
        if msg.kind == Kind.VALUE:
            self.values[msg.key] = (msg.seq, msg.arrays()[0].copy())

    def start(self):
        for key, shape in SHAPES.items():
            self.store.on_init(Message(Kind.INIT, key=key, seq=1, sender=-1,
                                       flags=Flag.HAS_VALUE, dtype=np.float32,
                                       meta={"shape": list(shape), "dtype": "<f4"},
                                       frames=[np.ones(shape, np.float32).reshape(-1)]))
        if self.sync.mode == "fsa":         # the local modes run the optimizer on workers
            self.store.on_set_optimizer(Message(Kind.SET_OPTIMIZER, sender=self.worker,
                                                meta={"spec": SPEC}))

    stop_after = 1 << 30                # esync: the worker finishes after this round

    def push(self, key, rnd):
        if rnd > self.stop_after:
            return
        grad = gradient(key, rnd, self.rank).reshape(-1)       # a gradient, or a delta
        self.store.on_push(Message(Kind.PUSH, key=key, seq=rnd, sender=self.worker,
                                   flags=Flag.WANT_VALUE, dtype=np.float32, frames=[grad]))

    def done(self) -> int:
        return min(self.values.get(k, (0,))[0] for k in SHAPES)

    def take(self, src, item):
        if isinstance(item, Message) and item.kind == Kind.STATE_REQUEST:
            self.recovery.on_state_request(src, item)
        elif isinstance(item, Message):
            self.recovery.on_state(src, item)
        else:
            self.exchange.on_chunk(src, *item)


def _cluster(names, seed, sync, compression):
    rng = random.Random(seed)
    trees, shares = random_trees(names, rng)
    policy = Policy(1, 1, tuple(trees), tuple(shares))
    net: list = []
    dcs = {d: _ModeDc(d, i, net, policy, names, sync, compression)
           for i, d in enumerate(names)}
    for dc in dcs.values():
        dc.start()
    return dcs, net, rng, policy


def _replace(dcs, net, lost, sync, compression, dead=None):
    """What the scheduler and the launchers do when the servers of ``lost`` die at once:
    the survivors freeze and report, one plan, new servers for the ``dead`` (default: every
    lost DC; a replacement still copying is lost again without dying), every DC replays."""
    names = tuple(dcs)
    dead = lost if dead is None else dead
    survivors = [d for d in names if d not in lost]
    latest = max(dcs[survivors[0]].policies.by_version)
    replacement = ServerReplacement(lost, survivors, deadline=1e9)
    for d in survivors:
        dcs[d].recovery.on_recover(Message(Kind.RECOVER, meta={"dc": replacement.lost_dc,
                                                               "version": latest + 1}))
        replacement.report(d, dcs[d].po.to_scheduler.pop().meta["keys"])
    plan = replacement.make_plan()
    olds = {}
    for d in dead:
        olds[d] = old = dcs[d]
        dcs[d] = _ModeDc(d, old.rank, net, None, names, sync, compression, replacing=True)
        dcs[d].values = old.values         # the worker lives on
    then = dcs[survivors[0]].policies.for_round(replacement.start_round)
    replay = Message(Kind.REPLAY, meta={    # the trees and shares in force (scheduler/rounds.py)
        "policy": Policy(latest + 1, replacement.start_round, then.trees,
                         then.shares).to_json(),
        "keys": [[k, r, list(holders), dg] for k, (r, holders, dg) in sorted(plan.items())]})
    for d in names:
        dcs[d].recovery.on_replay(replay)
    return olds, plan


def _zero_residuals_at(codec, rounds: dict) -> None:
    """The reference of a lost DC under compression: its residual of each key starts from
    zero at round ``rounds[key]``, as the replacement's does."""
    feedback = codec.feedback
    touch = feedback._touch

    def reset_then_touch(key, rnd):
        if rnd is not None and rounds.get(key) == rnd:
            feedback._residual.pop(key, None)
            feedback._velocity.pop(key, None)
            del rounds[key]
        touch(key, rnd)
    feedback._touch = reset_then_touch


def _lose_and_compare(names, lost, seed, sync, compression, rounds=10):
    dcs, net, rng, policy = _cluster(names, seed, sync, compression)
    _run(dcs, net, rng, until=3)
    _run(dcs, net, rng, until=rounds, steps=rng.randrange(1, 150))
    assert net                          # mid-round
    olds, plan = _replace(dcs, net, lost, sync, compression)
    _run(dcs, net, rng, until=0)        # copies only: no new pushes anywhere
    assert not any(dc.recovery.active for dc in dcs.values())
    for d, old in olds.items():
        _resend(old, dcs[d])
    _run(dcs, net, rng, until=rounds)
    # the same cluster without a loss (a lost DC's residuals restart from zero)
    ref, ref_net, _, _ = _cluster(names, seed, sync, compression)
    for d in lost if compression else ():
        _zero_residuals_at(ref[d].codec, {k: rnd + 1 for k, (rnd, _, _) in plan.items()})
    _run(ref, ref_net, random.Random(seed + 1000), until=rounds)
    for d in names:
        for key in SHAPES:
            err = f"{d} key {key}, lost {lost} with plan {plan}"
            np.testing.assert_array_equal(dcs[d].store.keys[key].value,
                                          ref[d].store.keys[key].value, err_msg=err)
            assert dcs[d].values[key][0] == rounds
            np.testing.assert_array_equal(dcs[d].values[key][1], ref[d].values[key][1],
                                          err_msg=err)
    return dcs, plan


MODES = {"fsa-2bit": (SyncConfig(), TWO_BIT),
         "hfa": (SyncConfig(mode="hfa", k1=1, k2=1), None),
         "esync": (SyncConfig(mode="esync"), None),
         "diloco": (SyncConfig(mode="diloco", outer_lr=0.5, outer_momentum=0.75), None),
         "diloco-2bit": (SyncConfig(mode="diloco", outer_lr=0.5, outer_momentum=0.75), TWO_BIT)}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_recover_a_lost_server_in_process_in_every_mode_exactly(mode, seed):
    """dc b's server lost at a random message of a round (3 DCs): under compression every
    DC's residuals are rolled back to before the rounds replayed (the replacement's start
    from zero, and so do b's in the reference); under hfa/esync/diloco the mode's state
    (diloco's outer momentum) comes with the replica. Every replica and every worker's
    values equal the run without a loss, bit for bit."""
    sync, compression = MODES[mode]
    dcs, _ = _lose_and_compare(("a", "b", "c"), ("b",), seed, sync, compression)
    if sync.mode == "diloco":
        assert dcs["b"].store.mode.outer.buffers.keys() == set(SHAPES)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", ["fsa", "fsa-2bit", "diloco"])
def test_recover_two_servers_lost_at_once_in_process_exactly(mode, seed):
    """dcs b and d lost at the same moment (4 DCs): one plan from the two survivors, both
    new servers copy every key from them, and every DC ends as without a loss."""
    sync, compression = (SyncConfig(), None) if mode == "fsa" else MODES[mode]
    _, plan = _lose_and_compare(("a", "b", "c", "d"), ("b", "d"), seed, sync, compression)
    assert all(set(holders) <= {"a", "c"} for _, holders, _ in plan.values())


def test_recover_refuses_a_plan_with_no_surviving_dc():
    with pytest.raises(RecoveryError, match="the servers of every DC .a, b. were lost"):
        ServerReplacement(("a", "b"), (), deadline=1.0)
    with pytest.raises(ValueError, match="must be two sets"):
        ServerReplacement(("a",), ("a", "b"), deadline=1.0)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", ["fsa", "fsa-2bit"])
def test_recover_a_loss_during_a_replacement_in_process_exactly(mode, seed):
    """dc b's server is lost; while it is being replaced (a random number of the copies
    and replays delivered), dc c's server dies too. The replacement starts again under a
    new version with both lost (b's new server, if not back yet, copies again; its
    earlier requests and copies are dropped as stale), and every DC ends as without a
    loss."""
    sync, compression = (SyncConfig(), None) if mode == "fsa" else MODES[mode]
    names = ("a", "b", "c", "d")
    dcs, net, rng, _ = _cluster(names, seed, sync, compression)
    _run(dcs, net, rng, until=3)
    _run(dcs, net, rng, until=10, steps=rng.randrange(1, 150))
    first, plan1 = _replace(dcs, net, ("b",), sync, compression)
    _run(dcs, net, rng, until=0, steps=rng.randrange(0, 24))
    b_back = not dcs["b"].recovery.active
    lost = ("c",) if b_back else ("b", "c")
    second, plan2 = _replace(dcs, net, lost, sync, compression, dead=("c",))
    _run(dcs, net, rng, until=0)
    assert not any(dc.recovery.active for dc in dcs.values())
    for d, old in {**second, **first}.items():
        _resend(old, dcs[d])
    _run(dcs, net, rng, until=10)
    ref, ref_net, _, _ = _cluster(names, seed, sync, compression)
    if compression:
        b_plan = plan1 if b_back else plan2
        _zero_residuals_at(ref["b"].codec, {k: r + 1 for k, (r, _, _) in b_plan.items()})
        _zero_residuals_at(ref["c"].codec, {k: r + 1 for k, (r, _, _) in plan2.items()})
    _run(ref, ref_net, random.Random(seed + 1000), until=10)
    for d in names:
        for key in SHAPES:
            np.testing.assert_array_equal(dcs[d].store.keys[key].value,
                                          ref[d].store.keys[key].value,
                                          err_msg=f"{d} key {key}: {plan1} then {plan2}")


def _behind_case(sync):
    """A seed where a survivor (a) is a round behind c on a key K when b is lost, and b's
    replacement asks c for K and a for the other key. Deterministic (the seeds are)."""
    for seed in range(200):
        dcs, net, rng, _ = _cluster(("a", "b", "c"), seed, sync, None)
        _run(dcs, net, rng, until=3)
        _run(dcs, net, rng, until=10, steps=rng.randrange(1, 150))
        behind = [k for k in SHAPES if dcs["a"].store.keys[k].applied
                  < dcs["c"].store.keys[k].applied]
        if not behind:
            continue
        first, plan1 = _replace(dcs, net, ("b",), sync, None)
        sources = {src for _, _, src in dcs["b"].recovery.awaiting.values()}
        if sources == {"a", "c"}:
            return seed, dcs, net, rng, behind[0], first, plan1
    raise AssertionError("no seed with a survivor a round behind")


def test_recover_copies_again_and_drops_stale_replicas_when_the_holder_dies_in_process(
        caplog):
    """b is lost; its replacement copies key K from c, the only holder of K's latest round
    (a is a round behind), and the other key from a. c dies before a copied K: the new
    plan, from a alone, puts K a round lower. b copies K again at that round (what it took
    from c is replaced), a's answer to the first attempt is dropped as stale, and every DC
    ends as without a loss."""
    sync = SyncConfig()
    seed, dcs, net, rng, key, first, plan1 = _behind_case(sync)
    assert plan1[key][1] == ("c",)
    for item in [item for item in net if item[1] == "b"]:     # b's requests, answered
        net.remove(item)
        dcs[item[0]].take("b", item[2])
    for item in [item for item in net if item[0] == "b" and item[1] == "c"]:
        net.remove(item)
        dcs["b"].take("c", item[2])                           # c's copy taken
    assert dcs["b"].recovery.active and dcs["b"].store.keys[key].applied == plan1[key][0]
    stale = [item for item in net if item[0] == "b"]         # a's copy, still on its way
    assert stale
    net[:] = [item for item in net if item not in stale]
    second, plan2 = _replace(dcs, net, ("b", "c"), sync, None, dead=("c",))
    assert plan2[key][0] == plan1[key][0] - 1                 # lower than b took it
    for dst, src, item in stale:
        dcs[dst].take(src, item)
    assert "b: dropped STATE from a: of an earlier recovery" in caplog.text
    _run(dcs, net, rng, until=0)
    assert not any(dc.recovery.active for dc in dcs.values())
    for d, old in {**second, **first}.items():
        _resend(old, dcs[d])
    _run(dcs, net, rng, until=10)
    ref, ref_net, _, _ = _cluster(("a", "b", "c"), seed, sync, None)
    _run(ref, ref_net, random.Random(seed + 1000), until=10)
    for d in "abc":
        for k in SHAPES:
            np.testing.assert_array_equal(dcs[d].store.keys[k].value,
                                          ref[d].store.keys[k].value, err_msg=f"{d} key {k}")


@pytest.mark.parametrize("seed", range(4))
def test_recover_an_esync_server_whose_worker_finished_in_process_exactly(seed):
    """esync: dc a's only worker finished after round 4, so a contributes zeros to the
    rounds the others go on with; then a's server is lost. Its replacement hears again
    that the worker left (as the scheduler tells it, scheduler/replacing.py), copies a
    peer's replica, contributes zeros again, and every DC ends as without a loss."""
    sync, names = SyncConfig(mode="esync"), ("a", "b", "c")

    def finished(dcs):
        dcs["a"].stop_after = 4
        for dc in dcs.values():
            dc.store.worker_left(100, {k: 4 for k in SHAPES}, everyone=False)

    dcs, net, rng, _ = _cluster(names, seed, sync, None)
    _run(dcs, net, rng, until=4)
    finished(dcs)
    _run(dcs, net, rng, until=10, steps=rng.randrange(1, 150))
    survivors = ("b", "c")
    latest = max(dcs["b"].policies.by_version)
    replacement = ServerReplacement("a", survivors, deadline=1e9)
    for d in survivors:
        dcs[d].recovery.on_recover(Message(Kind.RECOVER, meta={"dc": "a",
                                                               "version": latest + 1}))
        replacement.report(d, dcs[d].po.to_scheduler.pop().meta["keys"])
    plan = replacement.make_plan()
    dcs["a"] = new = _ModeDc("a", 0, net, None, names, sync, replacing=True)
    new.stop_after = 4
    new.store.worker_left(100, {k: 4 for k in SHAPES}, everyone=False)   # told again
    then = dcs["b"].policies.for_round(replacement.start_round)
    replay = Message(Kind.REPLAY, meta={
        "policy": Policy(latest + 1, replacement.start_round, then.trees,
                         then.shares).to_json(),
        "keys": [[k, r, list(h), dg] for k, (r, h, dg) in sorted(plan.items())]})
    for d in names:
        dcs[d].recovery.on_replay(replay)
    _run(dcs, net, rng, until=0)
    assert not any(dc.recovery.active for dc in dcs.values())
    _run(dcs, net, rng, until=10)
    ref, ref_net, ref_rng, _ = _cluster(names, seed, sync, None)
    _run(ref, ref_net, ref_rng, until=4)
    finished(ref)
    _run(ref, ref_net, random.Random(seed + 1000), until=10)
    for d in names:
        for key in SHAPES:
            assert dcs[d].store.keys[key].applied == 10
            np.testing.assert_array_equal(dcs[d].store.keys[key].value,
                                          ref[d].store.keys[key].value, err_msg=f"{d} {key}")
