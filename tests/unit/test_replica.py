"""geoserver/server/replica.py: a replica of some keys as a STATE message, checked on arrival."""
import mxnet as mx
import numpy as np
import pytest

from netstorm.geoserver.core import kinds
from netstorm.geoserver.model.optimizer_host import OptimizerHost, optimizer_spec
from netstorm.geoserver.server.replica import KeyReplica, ReplicaError, decode, digest, encode
from netstorm.geoserver.core.wire import Kind, Message, decode as wire_decode, encode as wire_encode

SPEC = optimizer_spec(mx.optimizer.create("sgd", learning_rate=0.5, momentum=0.5))


def _host_after_two_steps():
    host = OptimizerHost(SPEC)
    w = np.arange(6, dtype=np.float32)
    for _ in range(2):
        w = host.update(3, np.ones(6, np.float32), w)
    return host, w


def _over_the_wire(meta, frames) -> Message:
    msg = Message(Kind.STATE, meta=meta, dtype=np.uint8, frames=frames)
    return kinds.validate(wire_decode([bytes(f) for f in wire_encode(msg)]))


def test_a_replica_with_optimizer_states_round_trips_and_the_states_continue_alike():
    host, w = _host_after_two_steps()
    rep = KeyReplica(3, 2, (2, 3), np.dtype(np.float32), False, w)
    meta, frames = encode([rep], SPEC, host.key_states([3]))
    msg = _over_the_wire(meta, frames)
    (got,), spec, states, state_frames, mode = decode(msg.meta, msg.frames, {3: (2, digest(w))})
    assert (got.key, got.round, got.shape, got.sparse) == (3, 2, (2, 3), False)
    np.testing.assert_array_equal(got.value, w)
    copy = OptimizerHost(spec)
    copy.merge_states(states, state_frames, [3])
    a = host.update(3, np.full(6, 2, np.float32), w)      # momentum and count carried over
    b = copy.update(3, np.full(6, 2, np.float32), got.value)
    np.testing.assert_array_equal(a, b)


def test_a_replica_is_refused_unless_it_is_the_planned_round_and_digest():
    w = np.arange(4, dtype=np.float32)
    meta, frames = encode([KeyReplica(0, 5, (4,), np.dtype(np.float32), False, w)], None, None)
    with pytest.raises(ReplicaError, match="key 0 is at round 5, the plan says 6"):
        decode(meta, frames, {0: (6, digest(w))})
    with pytest.raises(ReplicaError, match="key 0 was not asked for"):
        decode(meta, frames, {1: (5, digest(w))})
    bad = [frames[0].copy()]
    bad[0][0] ^= 0x40
    with pytest.raises(ReplicaError, match=r"key 0 \(round 5\) fails its checksum"):
        decode(meta, bad, {0: (5, digest(w))})


def test_optimizer_states_whose_bytes_changed_are_refused():
    host, w = _host_after_two_steps()
    meta, frames = encode([KeyReplica(3, 2, (6,), np.dtype(np.float32), False, w)], SPEC,
                          host.key_states([3]))
    frames[-1] = frames[-1].copy()
    frames[-1][0] ^= 1
    with pytest.raises(ReplicaError, match="optimizer states fail their checksum"):
        decode(meta, frames, {3: (2, digest(w))})


def test_a_replica_carries_the_sync_modes_state_checked_by_its_own_digest():
    """diloco's outer momentum travels after the optimizer states, with its digest; a byte
    flipped in it, or an array of another size than its row says, is refused."""
    host, w = _host_after_two_steps()
    momentum = np.linspace(-1, 1, 6).astype(np.float32)
    meta, frames = encode([KeyReplica(3, 2, (6,), np.dtype(np.float32), False, w)], SPEC,
                          host.key_states([3]), [(3, momentum)])
    msg = _over_the_wire(meta, frames)
    _, _, states, state_frames, mode = decode(msg.meta, msg.frames, {3: (2, digest(w))})
    np.testing.assert_array_equal(mode[3], momentum)
    OptimizerHost(SPEC).merge_states(states, state_frames, [3])    # its frames: not the mode's
    bad = list(frames)
    bad[-1] = bad[-1].copy()
    bad[-1][3] ^= 1
    with pytest.raises(ReplicaError, match="sync mode's state fails its checksum"):
        decode(meta, bad, {3: (2, digest(w))})
    meta["mode"]["buffers"][0][2] = 5
    with pytest.raises(ReplicaError, match="state of key 3 is doubled or is not 5 x"):
        decode(meta, frames, {3: (2, digest(w))})


def test_a_replica_without_mode_state_passes_the_schema_and_decodes_none():
    w = np.arange(4, dtype=np.float32)
    meta, frames = encode([KeyReplica(0, 5, (4,), np.dtype(np.float32), False, w)], None, None)
    assert meta["mode"] is None
    assert decode(_over_the_wire(meta, frames).meta, frames, {0: (5, digest(w))})[4] == {}
