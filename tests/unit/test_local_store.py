"""KeyStore: one DC's rounds, pulls and errors, driven without sockets."""
import mxnet as mx
import numpy as np
import pytest

from fakes import init_message, push_message
from netstorm.geoserver.server.local_store import KeyStore, RequestError
from netstorm.geoserver.server.mixed_sync import MixedExchange
from netstorm.geoserver.config.sync import SyncConfig
from netstorm.geoserver.model.optimizer_host import optimizer_spec
from netstorm.geoserver.policy.tree import PolicyBook
from netstorm.geoserver.compression import payload
from netstorm.geoserver.core.wire import Flag, Kind, Message, WireError
from netstorm.scheduler.policy import star_policy

W1, W2 = 11, 12


class Harness:
    def __init__(self, chunk_bytes=16, sync=SyncConfig(), staleness=0, all_workers=None,
                 policies=None, workers_per_dc=None):
        self.replies, self.contributed, self.forwarded, self.updates = [], [], [], []
        mixed = MixedExchange("dc0", ["dc0", "dc1"], staleness,
                              star_policy(["dc0", "dc1"], "dc0").trees[0].children_from,
                              lambda *u: self.updates.append(u),
                              lambda *a: self.store.compensated_step(*a)) \
            if sync.asynchronous else None
        self.store = KeyStore("dc0", [W1, W2], chunk_bytes,
                              policies or PolicyBook(star_policy(["dc0", "dc1"], "dc0")),
                              reply=lambda w, m: self.replies.append((w, m)),
                              contribute=lambda cid, a, where: self.contributed.append((cid, a)),
                              forward_init=lambda e, g: self.forwarded.append((e.key, g)),
                              sync=sync, mixed=mixed, all_workers=all_workers,
                              workers_per_dc=workers_per_dc)

    def init(self, worker, key, value=None, shape=(10,), gen=1):
        self.store.on_init(init_message(worker, key, value, shape, gen, request=1))

    def push(self, worker, key, rnd, value, want=True, request=2):
        self.store.on_push(push_message(worker, key, rnd, value, want, request))

    def complete_round(self):
        """Play the WAN: the DC's own sum comes straight back as the global total."""
        done, self.contributed = self.contributed, []
        for cid, array in done:
            self.store.deliver(cid.key, cid.chunk, cid.rnd, np.array(array))


def value_of(message):
    (array,) = message.arrays()
    return array


def test_round_contributes_once_all_local_workers_pushed_and_answers_pulls():
    h = Harness()
    h.init(W1, 0, np.arange(10, dtype=np.float32))
    h.init(W2, 0)
    assert [m.kind for _, m in h.replies] == [Kind.INIT_DONE, Kind.INIT_DONE]
    assert h.forwarded == [(0, 1)]          # rank 0's DC sends the value to the others
    h.replies.clear()
    h.push(W1, 0, 1, np.ones(10, np.float32))
    assert not h.contributed                # waiting for W2
    h.push(W2, 0, 1, np.full(10, 2, np.float32))
    assert len(h.contributed) == 3          # 10 floats in WAN chunks of 4
    assert [c.chunk for c, _ in h.contributed] == [0, 1, 2]
    assert np.array_equal(np.concatenate([a for _, a in h.contributed]), np.full(10, 3))
    assert not h.replies                    # value not applied before the global sum
    h.complete_round()
    assert {w for w, _ in h.replies} == {W1, W2}
    assert all(np.array_equal(value_of(m), np.full(10, 3)) for _, m in h.replies)


def test_init_waits_for_rank0_value_and_pull_sees_latest_round():
    h = Harness()
    h.init(W2, 0)                           # not rank 0: no value yet
    assert not h.replies
    h.init(W1, 0, np.full(10, 5, np.float32))
    assert sorted(w for w, _ in h.replies) == [W1, W2]
    h.replies.clear()
    h.store.on_pull(Message(Kind.PULL, sender=W1, key=0, seq=0, request=9))
    assert np.array_equal(value_of(h.replies[0][1]), np.full(10, 5))
    h.push(W1, 0, 1, np.ones(10, np.float32), want=False)
    h.store.on_pull(Message(Kind.PULL, sender=W1, key=0, seq=1, request=10))
    assert len(h.replies) == 1              # pull for round 1 waits
    h.push(W2, 0, 1, np.ones(10, np.float32), want=False)
    h.complete_round()
    assert h.replies[-1][1].request == 10 and np.array_equal(value_of(h.replies[-1][1]),
                                                             np.full(10, 2))


def test_inputs_received_are_not_modified():
    h = Harness()
    h.init(W1, 0, np.zeros(10, np.float32))
    h.init(W2, 0)
    a, b = np.ones(10, np.float32), np.ones(10, np.float32)
    h.push(W1, 0, 1, a)
    h.push(W2, 0, 1, b)
    h.complete_round()
    assert (a == 1).all() and (b == 1).all()


@pytest.mark.parametrize("action,message", [
    (lambda h: h.push(W1, 5, 1, np.ones(10, np.float32)), "not been initialized"),
    (lambda h: h.push(W1, 0, 2, np.ones(10, np.float32)), "expected round 1"),
    (lambda h: h.push(W1, 0, 1, np.ones(9, np.float32)), "expected one frame of 10"),
    (lambda h: h.init(W1, 0, shape=(5, 2)), "initialized as (10,)"),
    (lambda h: h.store.on_save_states(Message(Kind.SAVE_STATES, sender=W1)),
     "no optimizer was set"),
    (lambda h: h.store.on_set_optimizer(Message(Kind.SET_OPTIMIZER, sender=W1,
                                                meta={"spec": {"name": "nope"}})),
     "cannot build optimizer"),
])
def test_bad_requests_raise_request_error_and_change_nothing(action, message):
    h = Harness()
    h.init(W1, 0, np.zeros(10, np.float32))
    with pytest.raises(RequestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        action(h)
    h.push(W1, 0, 1, np.ones(10, np.float32))     # the store still works
    h.push(W2, 0, 1, np.ones(10, np.float32))
    assert len(h.contributed) == 3


def test_a_total_this_dc_never_sent_is_dropped_not_a_crash(caplog):
    h = Harness()
    h.init(W1, 0, np.arange(10, dtype=np.float32))
    h.init(W2, 0)
    h.push(W1, 0, 1, np.ones(10, np.float32))
    h.push(W2, 0, 1, np.ones(10, np.float32))
    for key, chunk, rnd, total in [(9, 0, 1, np.ones(4, np.float32)),      # unknown key
                                   (0, 0, 7, np.ones(4, np.float32)),      # unknown round
                                   (0, 5, 1, np.ones(4, np.float32)),      # unknown chunk
                                   (0, 0, 1, np.ones(3, np.float32)),      # wrong size
                                   (0, 0, 1, np.ones(4, np.float64))]:     # wrong dtype
        h.store.deliver(key, chunk, rnd, total)
    assert "dc0: dropped a chunk total: key 0 chunk 0 has 4 x float32, the total 3 x " \
           "float32" in caplog.text
    assert h.store.keys[0].applied == 0 and h.store.keys[0].rounds[1].chunks_done == 0
    h.complete_round()                                   # the real totals still apply
    assert h.store.keys[0].applied == 1


def _compressed_push(worker, key, rnd, values):
    wire = payload.half(np.asarray(values, np.float32))
    return Message(Kind.PUSH, sender=worker, key=key, seq=rnd, request=3, dtype=wire.dtype,
                   flags=Flag.ENCODED | Flag.WANT_VALUE, frames=[wire])


def test_compressed_pushes_are_decoded_only_when_the_cluster_allows_them():
    h = Harness()
    h.init(W1, 0, np.zeros(10, np.float32))
    h.init(W2, 0)
    with pytest.raises(RequestError, match="compressed push, but this cluster compresses "
                                           "only the WAN"):
        h.store.on_push(_compressed_push(W1, 0, 1, np.ones(10)))
    h.store.compressed_pushes = True
    h.store.on_push(_compressed_push(W1, 0, 1, np.full(10, 0.5)))
    h.push(W2, 0, 1, np.full(10, 2, np.float32))
    assert np.array_equal(np.concatenate([a for _, a in h.contributed]), np.full(10, 2.5))
    assert h.store.compressed_received == 1
    with pytest.raises(WireError, match="encodes 9 elements, the chunk has 10"):
        h.store.on_push(_compressed_push(W1, 0, 2, np.ones(9)))


def test_an_optimizer_with_momentum_is_refused_when_compression_applies_it():
    def set_optimizer(h, momentum):
        spec = optimizer_spec(mx.optimizer.create("sgd", learning_rate=0.1, momentum=momentum))
        h.store.on_set_optimizer(Message(Kind.SET_OPTIMIZER, sender=W1, request=4,
                                         meta={"spec": spec}))
    h = Harness()
    h.store.momentum_corrected = True
    with pytest.raises(RequestError, match="momentum=0.9 would apply it twice"):
        set_optimizer(h, 0.9)
    set_optimizer(h, 0.0)
    assert h.replies[-1][1].kind == Kind.OPTIMIZER_DONE
    plain = Harness()
    set_optimizer(plain, 0.9)                 # without DGC, momentum is the optimizer's
    assert plain.replies[-1][1].kind == Kind.OPTIMIZER_DONE


def test_a_row_sparse_key_is_updated_lazily():
    """A key declared row_sparse (INIT stype): the optimizer leaves the rows no gradient
    touched; a dense key's decay moves every row. Another DC's INIT declares it too."""
    spec = optimizer_spec(mx.optimizer.create("sgd", learning_rate=0.5, wd=0.5))
    grad = np.zeros((3, 2), np.float32)
    grad[1] = 1
    finals = {}
    for stype in ("row_sparse", None):
        h = Harness()
        init = init_message(W1, 0, np.ones(6, np.float32), shape=(3, 2))
        if stype:
            init.meta["stype"] = stype
        h.store.on_init(init)
        h.init(W2, 0, shape=(3, 2))
        assert h.store.keys[0].sparse == bool(stype)
        h.store.on_set_optimizer(Message(Kind.SET_OPTIMIZER, sender=W1, request=4,
                                         meta={"spec": spec}))
        for worker in (W1, W2):
            h.push(worker, 0, 1, grad.ravel() / 2, want=False)
        h.complete_round()
        finals[stype] = h.store.keys[0].value.reshape(3, 2)
    assert np.array_equal(finals["row_sparse"][[0, 2]], np.ones((2, 2)))
    assert np.allclose(finals[None][[0, 2]], 0.75)          # 1 - 0.5 * 0.5 * 1
    assert np.allclose(finals["row_sparse"][1], finals[None][1])
    h = Harness()
    forwarded = init_message(99, 0, np.ones(6, np.float32), shape=(3, 2))   # another DC's
    forwarded.meta.update(stype="row_sparse", origin="dc1")
    h.store.on_init(forwarded)
    assert h.store.keys[0].sparse


def test_resume_tells_a_rejoined_worker_the_rounds_its_rank_had_pushed():
    h = Harness()
    for key in (0, 1):
        h.init(W1, key, np.zeros(10, np.float32))
        h.init(W2, key)
    for worker in (W1, W2):
        h.push(worker, 0, 1, np.ones(10, np.float32), want=False)
    h.complete_round()
    h.push(W2, 0, 2, np.ones(10, np.float32), want=False)   # W2 is a round ahead on key 0
    h.replies.clear()
    h.store.on_resume(Message(Kind.RESUME, sender=W2, request=7))
    (worker, reply), = h.replies
    assert worker == W2 and reply.kind == Kind.RESUMED and reply.request == 7
    assert sorted(reply.meta["pushed"]) == [[0, 2], [1, 0]]
    h.store.on_resume(Message(Kind.RESUME, sender=W1, request=8))
    assert sorted(h.replies[-1][1].meta["pushed"]) == [[0, 1], [1, 0]]


def test_a_resumed_run_takes_saved_keys_from_the_checkpoint_without_the_wan():
    """Every DC reads the checkpoint: the first INIT of a saved key, with or without rank
    0's value, is answered at once with the saved value and nothing is forwarded; a key
    the checkpoint lacks, or a later re-init, goes the usual way."""
    from netstorm.geoserver.model.checkpoint import Checkpoint
    h = Harness()
    h.store.resumed = Checkpoint(12, {0: np.full(10, 7, np.float32)})
    h.init(W2, 0)                                       # not rank 0: no value, no wait
    assert [m.kind for _, m in h.replies] == [Kind.INIT_DONE]
    h.init(W1, 0, np.zeros(10, np.float32))             # rank 0's value does not replace it
    assert np.array_equal(h.store.keys[0].value, np.full(10, 7)) and h.forwarded == []
    h.init(W1, 1, np.ones(10, np.float32))              # not in the checkpoint
    assert h.forwarded == [(1, 1)] and np.array_equal(h.store.keys[1].value, np.ones(10))
    h.init(W1, 0, np.full(10, 3, np.float32), gen=2)    # a deliberate re-init later
    assert np.array_equal(h.store.keys[0].value, np.full(10, 3))
    with pytest.raises(RequestError, match=r"\[recovery\] resume: key 5 was saved as \(10,\)"):
        h.store.resumed.values[5] = np.zeros(10, np.float32)
        h.init(W1, 5, shape=(5, 2))


def test_the_model_bytes_are_every_declared_keys_bytes():
    h = Harness()
    assert h.store.model_bytes() == 0
    h.init(W1, 0, np.arange(10, dtype=np.float32))
    h.init(W1, 1, np.zeros((2, 3), np.float32), shape=(2, 3))
    assert h.store.model_bytes() == (10 + 6) * 4


def test_the_acknowledged_round_is_the_fewest_rounds_any_key_applied():
    """What a detour may forget (wan/send_queue.py): the rounds every key applied here."""
    h = Harness()
    assert h.store.acknowledged_round() == 0            # no key yet
    for key in (0, 1):
        h.init(W1, key, np.zeros(10, np.float32))
        h.init(W2, key)
    for rnd in (1, 2):
        for worker in (W1, W2):
            h.push(worker, 0, rnd, np.ones(10, np.float32))
        h.complete_round()
    assert h.store.acknowledged_round() == 0            # key 1 applied nothing yet
    for worker in (W1, W2):
        h.push(worker, 1, 1, np.ones(10, np.float32))
    h.complete_round()
    assert h.store.acknowledged_round() == 1
