"""shared_slots: a worker's segments, the server's mapping of them, and what it refuses."""

import os

import numpy as np
import pytest
from fakes import init_message, push_message
from netstorm.geoserver.core.shared_memory import (
    MIN_SHARED_BYTES,
    segment_bytes,
    slot_bytes,
    worth_sharing,
)
from netstorm.geoserver.core.wire import Flag, Kind, Message
from netstorm.geoserver.policy.tree import PolicyBook
from netstorm.geoserver.server.local_store import KeyStore, RequestError
from netstorm.geoserver.server.shared_segments import SharedSegments
from netstorm.geoserver.worker.shared_slots import WorkerShares, WorkerSlots
from netstorm.scheduler.policy import star_policy

SIZE = MIN_SHARED_BYTES // 4 + 3        # float32 elements: just above the threshold
W1, W2 = 11, 12


@pytest.fixture
def slots():
    made = WorkerSlots(7, SIZE, np.float32)
    yield made
    made.close()


def test_sizes_round_to_pages_and_small_keys_are_not_shared():
    assert slot_bytes(1) == slot_bytes(4096) == 4096 and slot_bytes(4097) == 8192
    assert segment_bytes(SIZE, np.float32) == 2 * slot_bytes(SIZE * 4)
    assert worth_sharing(SIZE, np.float32) and not worth_sharing(100, np.float32)


def test_the_server_maps_the_same_memory_the_worker_writes(slots):
    server = SharedSegments()
    assert server.attach(W1, 7, os.getpid(), slots.fd, SIZE, np.float32) == ""
    grad = np.arange(SIZE, dtype=np.float32)
    assert slots.take_push(1, grad)
    assert np.array_equal(server.push(W1, 7), grad)
    server.value(W1, 7)[:] = -grad
    assert np.array_equal(slots.value, -grad)
    assert server.push(W2, 7) is None and server.value(W1, 8) is None
    server.close()
    assert not server.has(W1, 7)


def test_the_push_slot_is_taken_again_only_after_a_value_of_its_round(slots):
    assert slots.take_push(3, np.ones(SIZE, np.float32))
    assert not slots.take_push(4, np.zeros(SIZE, np.float32))      # round 3 not applied
    assert slots.push[0] == 1
    slots.applied(2)
    assert not slots.take_push(4, np.zeros(SIZE, np.float32))
    slots.applied(3)
    assert slots.take_push(4, np.zeros(SIZE, np.float32)) and slots.push[0] == 0


class Store:
    def __init__(self):
        self.replies, self.contributed = [], []
        self.store = KeyStore("dc0", [W1, W2], 1 << 20,
                              PolicyBook(star_policy(["dc0", "dc1"], "dc0")),
                              reply=lambda w, m: self.replies.append((w, m)),
                              contribute=lambda cid, a, where: self.contributed.append((cid, a)),
                              forward_init=lambda e, g: None)

    def init(self, worker, slots=None, value=None):
        msg = init_message(worker, 0, value, (SIZE,), request=1)
        if slots is not None:
            msg.meta["shm_fd"], msg.peer_pid = slots.fd, os.getpid()
        self.store.on_init(msg)
        return self.replies.pop()[1]

    def complete_round(self):
        done, self.contributed = self.contributed, []
        for cid, array in done:
            self.store.deliver(cid.key, cid.chunk, cid.rnd, np.array(array))


def test_a_store_takes_shared_pushes_and_answers_into_the_value_slot(slots):
    s = Store()
    assert s.init(W1, slots, np.zeros(SIZE, np.float32)).meta == {"shared": True}
    assert s.init(W2).meta == {"shared": False}         # W2 offered nothing: frames
    slots.take_push(1, np.full(SIZE, 2, np.float32))
    s.store.on_push(Message(Kind.PUSH, sender=W1, key=0, seq=1, request=5, dtype=np.float32,
                            flags=Flag.SHARED | Flag.WANT_VALUE | Flag.REPLY_SHARED))
    slots.push[:] = 99          # the store copied the push out when it took it
    s.store.on_push(push_message(W2, 0, 1, np.full(SIZE, 3, np.float32), request=6))
    s.complete_round()
    answers = dict(s.replies)
    assert answers[W1].flags & Flag.SHARED and not answers[W1].frames
    assert np.array_equal(slots.value, np.full(SIZE, 5, np.float32))
    (frame,) = answers[W2].arrays()                     # W2 asked for a frame
    assert not answers[W2].flags & Flag.SHARED and np.array_equal(frame, slots.value)


def test_a_shared_push_without_a_segment_is_refused_and_a_declined_offer_says_so(slots):
    s = Store()
    s.init(W1, value=np.zeros(SIZE, np.float32))
    with pytest.raises(RequestError, match="shares no float32 segment"):
        s.store.on_push(Message(Kind.PUSH, sender=W2, key=0, seq=1, dtype=np.float32,
                                flags=Flag.SHARED))
    msg = init_message(W2, 0, None, (SIZE,), request=1)
    msg.meta["shm_fd"] = slots.fd       # over TCP: the Van found no local process id
    s.store.on_init(msg)
    assert s.replies.pop()[1].meta == {"shared": False}


def test_a_worker_uses_a_segment_only_while_the_server_maps_it():
    shares = WorkerShares(enabled=True)
    assert shares.offer(1, 10, np.float32) is None              # too small: frames
    offered = shares.offer(0, SIZE, np.float32)
    shares.settle(0, offered, accepted=True)
    assert shares.offer(0, SIZE, np.float32) is offered         # initialized again
    assert shares.push(0, 1, np.ones(SIZE, np.float32)) and shares.slots[0].pushes == 1
    shares.settle(0, offered, accepted=False)                   # declined this time
    assert 0 not in shares.slots and offered.push is None
    assert not shares.push(0, 2, np.ones(SIZE, np.float32))
    assert shares.reserve_reply(0) is None
    assert WorkerShares(enabled=False).offer(0, SIZE, np.float32) is None


def test_one_answer_per_key_in_the_value_slot_at_a_time(slots):
    shares = WorkerShares(enabled=True)
    shares.settle(7, slots, accepted=True)
    first = shares.reserve_reply(7)
    assert first is slots and shares.reserve_reply(7) is None
    shares.done(7, first, None)                 # no reply (a timeout): still reserved
    assert shares.reserve_reply(7) is None
    shares.done(7, first, Message(Kind.ERROR, key=7))
    assert shares.reserve_reply(7) is slots
    slots.take_push(3, np.ones(SIZE, np.float32))
    shares.done(7, slots, Message(Kind.VALUE, key=7, seq=3))    # round 3 applied
    assert slots.push_round == 0 and not slots.reply_busy
