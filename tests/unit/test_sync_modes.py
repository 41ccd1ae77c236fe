"""geoserver/server/sync_modes.py: one strategy per sync mode, chosen once from the
SyncConfig; driven through the KeyStore, without sockets (the store's harness is
test_local_store's)."""
import logging

import mxnet as mx
import numpy as np
import pytest

from netstorm.geoserver.config import sync as sync_config
from netstorm.geoserver.config.sync import SyncConfig
from netstorm.geoserver.core.wire import Flag, Kind, Message
from netstorm.geoserver.model.optimizer_host import optimizer_spec
from netstorm.geoserver.server.local_store import RequestError
from netstorm.geoserver.server.sync_modes import (MODES, DilocoMode, EsyncMode, FsaMode,
                                                  HfaMode, MixedMode, OuterNesterov, SyncMode,
                                                  create)
from netstorm.geoserver.policy.tree import PolicyBook
from netstorm.scheduler.policy import star_policy

from .test_local_store import W1, W2, Harness, value_of


def f32(*values):
    return np.array(values, dtype=np.float32)


def test_hfa_local_rounds_add_average_deltas_and_every_k2th_sends_the_dc_delta_to_the_wan():
    """Averages: a DC round moves by its workers' mean delta; the WAN round's total is sent
    weighted by the DC's workers and divided by every worker of the cluster."""
    h = Harness(sync=SyncConfig(mode="hfa", k2=2))
    h.init(W1, 0, f32(1, 2, 3), shape=(3,))
    h.init(W2, 0, shape=(3,))
    h.replies.clear()
    h.push(W1, 0, 1, f32(1, 0, 0))              # DC round 1: within the DC only
    h.push(W2, 0, 1, f32(0, 2, 0))
    assert not h.contributed
    assert [value_of(m).tolist() for _, m in h.replies] == [[1.5, 3, 3]] * 2
    h.replies.clear()
    h.push(W1, 0, 2, f32(0, 0, 4))              # DC round 2 = WAN round 1
    h.push(W2, 0, 2, f32(8, 0, 0))
    assert not h.replies
    ((cid, delta),) = h.contributed
    assert cid.rnd == 1 and delta.tolist() == [9, 2, 4]     # both rounds' deltas
    h.store.deliver(0, 0, 1, f32(10, 20, 30))  # the WAN's sum of every DC's delta
    assert [value_of(m).tolist() for _, m in h.replies] == [[6, 12, 18]] * 2
    assert h.store.keys[0].base.tolist() == [6, 12, 18]
    assert h.store.max_round == 1               # rounds reported are WAN rounds


def test_hfa_refuses_a_push_before_the_previous_round_came_back_and_any_optimizer():
    h = Harness(sync=SyncConfig(mode="hfa", k1=2))
    h.init(W1, 0, f32(1, 2, 3), shape=(3,))
    h.push(W1, 0, 1, f32(1, 1, 1))
    with pytest.raises(RequestError, match="pushes round 2 only after it received round 1"):
        h.push(W1, 0, 2, f32(1, 1, 1))
    with pytest.raises(RequestError, match="workers run the optimizer themselves"):
        h.store.on_set_optimizer(Message(Kind.SET_OPTIMIZER, sender=W1, request=4, meta={
            "spec": optimizer_spec(mx.optimizer.SGD(learning_rate=0.1))}))


def test_esync_goes_on_without_a_worker_that_left_and_a_dc_left_alone_sends_zeros():
    h = Harness(sync=SyncConfig(mode="esync"))
    h.init(W1, 0, f32(1, 2, 3), shape=(3,))
    h.init(W2, 0, shape=(3,))
    h.push(W1, 0, 1, f32(1, 0, 0))
    h.push(W2, 0, 1, f32(0, 1, 0))
    ((cid, delta),) = h.contributed
    assert delta.tolist() == [1, 1, 0]          # each worker's contribution, once
    h.complete_round()
    h.store.worker_left(W2, {0: 1}, everyone=False)     # W2 pushed round 1 only
    h.replies.clear()
    h.push(W1, 0, 2, f32(0, 0, 5))              # round 2 needs W1 alone now
    ((cid, delta),) = h.contributed
    assert (cid.rnd, delta.tolist()) == (2, [0, 0, 5])
    h.complete_round()
    assert [value_of(m).tolist() for w, m in h.replies] == [[2, 3, 8]]
    with pytest.raises(RequestError, match="expected round 3"):
        h.push(W1, 0, 2, f32(1, 1, 1))          # the same round twice: refused
    h.store.worker_left(W1, {0: 2}, everyone=False)     # nobody left here, others go on
    ((cid, delta),) = h.contributed
    assert (cid.rnd, delta.tolist()) == (3, [0, 0, 0])
    h.complete_round()                          # round 3 applied: round 4 offered at once
    assert [c.rnd for c, _ in h.contributed] == [4]
    h.contributed.clear()
    h.store.worker_left(W1, {0: 2}, everyone=True)      # the last worker anywhere left
    h.store.deliver(0, 0, 4, f32(0, 0, 0))
    assert not h.contributed                    # nothing more to go on with


def test_mixed_applies_its_round_at_once_and_answers_within_the_staleness_bound():
    h = Harness(sync=SyncConfig(mode="mixed"), staleness=0)
    h.init(W1, 0, f32(1, 2, 3), shape=(3,))
    with pytest.raises(RequestError, match="set an optimizer first"):
        h.push(W1, 0, 1, f32(1, 1, 1))
    h.store.on_set_optimizer(Message(Kind.SET_OPTIMIZER, sender=W1, request=4, meta={
        "spec": optimizer_spec(mx.optimizer.SGD(learning_rate=0.5))}))
    h.replies.clear()
    h.push(W1, 0, 1, f32(2, 0, 0))
    h.push(W2, 0, 1, f32(0, 2, 0))
    assert h.store.keys[0].value.tolist() == [0, 1, 3]      # applied here at once
    ((dc, key, rnd, origin, grad),) = h.updates
    assert (dc, key, rnd, origin, grad.tolist()) == ("dc1", 0, 1, "dc0", [2, 2, 0])
    assert not h.replies                        # staleness 0: waits for dc1's round 1
    h.store.on_update(Message(Kind.UPDATE, key=0, seq=1, meta={"origin": "dc1"},
                              dtype=np.float32, frames=[f32(0, 0, 4)]), "dc1")
    assert [value_of(m).tolist() for _, m in h.replies] == [[0, 1, 1]] * 2
    h.store.on_update(Message(Kind.UPDATE, key=0, seq=2, meta={"origin": "dc1"},
                              dtype=np.float32, frames=[f32(0, 0, 4, 4)]), "dc1")
    assert h.store.mode.exchange.state(0).remote["dc1"] == 1    # wrong size: dropped


def test_mixed_keeps_an_update_that_beats_the_initial_value_until_it_arrives():
    """Updates go straight from DC to DC, initial values along a tree: an update can come
    first, and is applied once the value is there (it used to be dropped: a hang)."""
    h = Harness(sync=SyncConfig(mode="mixed"), staleness=0)
    h.store.on_set_optimizer(Message(Kind.SET_OPTIMIZER, sender=W1, request=4, meta={
        "spec": optimizer_spec(mx.optimizer.SGD(learning_rate=0.5))}))
    h.store.on_update(Message(Kind.UPDATE, key=0, seq=1, meta={"origin": "dc1"},
                              dtype=np.float32, frames=[f32(2, 2, 2)]), "dc1")
    assert 0 not in h.store.keys and h.store.mode._early_updates
    h.store.on_init(Message(Kind.INIT, sender=99, key=0, seq=1, flags=Flag.HAS_VALUE,
                            meta={"shape": [3], "dtype": "<f4", "origin": "dc1"},
                            dtype=np.float32, frames=[f32(1, 2, 3)]))
    assert h.store.keys[0].value.tolist() == [0, 1, 2] and not h.store.mode._early_updates
    assert h.store.mode.exchange.state(0).remote["dc1"] == 1


# ---------------------------------------------------------------- the registry
@pytest.mark.parametrize("mode, kind", [("fsa", FsaMode), ("hfa", HfaMode),
                                        ("esync", EsyncMode), ("mixed", MixedMode)])
def test_each_mode_of_the_config_gets_its_own_strategy_once(mode, kind):
    h = Harness(sync=SyncConfig(mode=mode))
    assert type(h.store.mode) is kind and h.store.mode.store is h.store
    assert isinstance(h.store.mode, SyncMode)       # every method of the interface
    assert set(MODES) == set(sync_config.MODES)


def test_a_mixed_exchange_is_taken_under_mixed_and_only_there():
    with pytest.raises(ValueError, match="sync mode 'mixed' takes a MixedExchange"):
        create(SyncConfig(mode="mixed"), store=None)
    with pytest.raises(ValueError, match="sync mode 'hfa' takes no MixedExchange"):
        create(SyncConfig(mode="hfa"), store=None, exchange=object())


def test_a_worker_leaving_or_an_update_outside_their_mode_is_logged_and_changes_nothing(
        caplog):
    h = Harness()
    h.init(W1, 0, f32(1, 2, 3), shape=(3,))
    h.init(W2, 0, shape=(3,))
    h.push(W1, 0, 1, f32(1, 1, 1))
    with caplog.at_level(logging.WARNING):
        h.store.worker_left(W2, {0: 0}, everyone=False)
        h.store.on_update(Message(Kind.UPDATE, key=0, seq=1, meta={"origin": "dc1"},
                                  dtype=np.float32, frames=[f32(9, 9, 9)]), "dc1")
    assert "ignored a worker leaving under sync mode 'fsa'" in caplog.text
    assert "dropped update of key 0 from dc1: sync mode is 'fsa'" in caplog.text
    assert not h.contributed and h.store.keys[0].value.tolist() == [1, 2, 3]
    h.push(W2, 0, 1, f32(1, 1, 1))              # round 1 still needs W2
    assert len(h.contributed) == 1


def test_diloco_applies_an_outer_nesterov_step_to_the_average_over_every_worker():
    """2 local workers of 4 in the cluster; outer lr 0.5, momentum 0.5. Round 1's total
    delta (8, -4) is an average (2, -1), pseudo-gradient g = (-2, 1): b = g, w -= 0.5 (g +
    0.5 b). Round 2 with the same total: b = 0.5 b + g = 1.5 g, w -= 0.5 (g + 0.75 g)."""
    h = Harness(sync=SyncConfig(mode="diloco", h=5, outer_lr=0.5, outer_momentum=0.5),
                all_workers=4)
    h.init(W1, 0, f32(1, 1), shape=(2,))
    h.init(W2, 0, shape=(2,))
    for rnd, want in ((1, [2.5, 0.25]), (2, [4.25, -0.625])):
        h.replies.clear()
        h.push(W1, 0, rnd, f32(3, -1))
        h.push(W2, 0, rnd, f32(1, -1))
        ((cid, delta),) = h.contributed
        assert cid.rnd == rnd and delta.tolist() == [4, -2]     # the DC's sum travels
        h.contributed.clear()
        h.store.deliver(0, 0, rnd, f32(8, -4))                  # every DC's sum
        assert [value_of(m).tolist() for _, m in h.replies] == [want] * 2
        assert h.store.keys[0].base.tolist() == want
    with pytest.raises(RequestError, match="workers run the optimizer themselves"):
        h.store.on_set_optimizer(Message(Kind.SET_OPTIMIZER, sender=W1, request=4, meta={
            "spec": optimizer_spec(mx.optimizer.SGD(learning_rate=0.1))}))


def test_diloco_in_an_elastic_run_averages_over_the_workers_of_the_dcs_a_round_spans():
    """dc0 (2 workers, this DC), dc1 (2) and dc2 (4); dc2 leaves from round 2 (a policy over
    dc0 and dc1 from then on, as the scheduler's replay policy is). Plain averaging (outer
    lr 1, no momentum): round 1's total (16, -8) is over 8 workers, round 2's (8, -4) over
    the 4 left, an average delta of (2, -1) both times."""
    book = PolicyBook(star_policy(["dc0", "dc1", "dc2"], "dc0"))
    book.add(star_policy(["dc0", "dc1"], "dc0", version=2, start_round=2))
    h = Harness(sync=SyncConfig(mode="diloco", h=5, outer_lr=1.0, outer_momentum=0.0),
                all_workers=8, policies=book, workers_per_dc={"dc0": 2, "dc1": 2, "dc2": 4})
    assert [h.store.contributors(r) for r in (1, 2, 3)] == [8, 4, 4]
    h.init(W1, 0, f32(1, 1), shape=(2,))
    h.init(W2, 0, shape=(2,))
    for rnd, total, want in ((1, f32(16, -8), [3, 0]), (2, f32(8, -4), [5, -1])):
        h.push(W1, 0, rnd, f32(3, -1))
        h.push(W2, 0, rnd, f32(1, -1))
        h.contributed.clear()
        h.store.deliver(0, 0, rnd, total)
        assert h.store.keys[0].base.tolist() == want, rnd


def test_outer_nesterov_with_lr_1_and_no_momentum_is_model_averaging_and_keeps_no_state():
    outer = OuterNesterov(1.0, 0.0)
    w = f32(1, 2, 3)
    assert outer.step(0, w, -f32(0.5, 0, -1)).tolist() == [1.5, 2, 2]
    assert not outer.buffers and w.tolist() == [1, 2, 3]


def test_outer_nesterov_is_the_same_bits_in_every_dc_for_the_same_totals():
    rng = np.random.default_rng(3)
    a, b = OuterNesterov(0.7, 0.9), OuterNesterov(0.7, 0.9)
    wa = wb = rng.standard_normal(1000).astype(np.float32)
    for _ in range(5):
        g = rng.standard_normal(1000).astype(np.float32)
        wa, wb = a.step(7, wa, g), b.step(7, wb, g.copy())
    assert wa.dtype == np.float32 and wa.tobytes() == wb.tobytes()
