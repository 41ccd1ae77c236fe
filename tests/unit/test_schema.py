"""netstorm.geoserver.core.schema: every kind has a schema; a valid example of each passes (as
encoded and decoded), and each kind of violation is rejected with a reason naming the field."""
import copy

import numpy as np
import pytest

from netstorm.geoserver.core import kinds, schema, wire
from netstorm.geoserver.model.optimizer_host import states_to_wire
from netstorm.geoserver.config.settings import ProbeRequest, RuntimeSettings
from netstorm.geoserver.core.wire import Flag, Kind, Message
from netstorm.scheduler.policy import star_policy

F4 = np.arange(6, dtype=np.float32)
SPEC = {"name": "sgd", "attrs": {"lr": 0.1, "momentum": 0.9, "multi_precision": False,
                                 "clip_gradient": None, "aggregate_num": 1, "betas": [0.9, 0.99]},
        "lr_mult": [[0, 0.5]], "wd_mult": [], "named_lr_mult": {"fc_weight": 0.5},
        "named_wd_mult": {}, "idx2name": [[0, "fc_weight"]],
        "lr_scheduler": {"name": "FactorScheduler", "attrs": {"step": 2, "factor": 0.5}}}
STATES_META, STATES_FRAMES = states_to_wire(
    {0: np.ones((2, 3), np.float32), 1: (np.zeros(4, np.float16), 3.0), 2: None}, {0: 1, 1: 2}, 3)
NODES = [{"id": 0, "role": "scheduler", "dc": "", "address": "tcp://h:1", "rank": -1,
          "local_rank": -1},
         {"id": 1, "role": "server", "dc": "eu", "address": "tcp://h:2", "rank": -1,
          "local_rank": -1}]

VALID = {
    Kind.REGISTER: Message(Kind.REGISTER, meta={"role": "worker", "dc": "eu", "address": "tcp://h:3",
                                                "host": "h", "pid": 42, "local_index": -1}),
    Kind.WELCOME: Message(Kind.WELCOME, meta={
        "nodes": NODES, "you": 1, "policy": star_policy(["eu", "us"], "eu").to_json(),
        "settings": RuntimeSettings(links=(("eu", "us", 10.0, 20.0),)).to_json()}),
    Kind.BARRIER: Message(Kind.BARRIER, seq=3),
    Kind.BARRIER_DONE: Message(Kind.BARRIER_DONE, seq=3),
    Kind.HEARTBEAT: Message(Kind.HEARTBEAT, meta={"round": 4, "links": {"us": [12.5, 0.3]},
                                                  "stalled": ["us"]}),
    Kind.ABORT: Message(Kind.ABORT, meta={"reason": "dc1 left the run", "left": True}),
    Kind.BYE: Message(Kind.BYE, meta={"clean": True, "reason": ""}),
    Kind.SHUTDOWN: Message(Kind.SHUTDOWN),
    Kind.INIT: Message(Kind.INIT, key=1, seq=1, flags=Flag.HAS_VALUE,
                       meta={"shape": [2, 3], "dtype": F4.dtype.str, "origin": "eu",
                             "stype": "row_sparse"},
                       dtype=F4.dtype, frames=[F4]),
    Kind.INIT_DONE: Message(Kind.INIT_DONE, key=1, request=2),
    Kind.PUSH: Message(Kind.PUSH, key=1, seq=1, flags=Flag.WANT_VALUE, dtype=F4.dtype,
                       frames=[F4]),
    Kind.PULL: Message(Kind.PULL, key=1, seq=1),
    Kind.VALUE: Message(Kind.VALUE, key=1, dtype=F4.dtype, frames=[F4]),
    Kind.SET_OPTIMIZER: Message(Kind.SET_OPTIMIZER, meta={"spec": SPEC}),
    Kind.OPTIMIZER_DONE: Message(Kind.OPTIMIZER_DONE),
    Kind.SAVE_STATES: Message(Kind.SAVE_STATES),
    Kind.STATES: Message(Kind.STATES, meta=STATES_META, dtype=np.uint8, frames=STATES_FRAMES),
    Kind.LOAD_STATES: Message(Kind.LOAD_STATES, meta=STATES_META, dtype=np.uint8,
                              frames=STATES_FRAMES),
    Kind.CHUNK_UP: Message(Kind.CHUNK_UP, key=1, seq=1, policy=1, dtype=F4.dtype, frames=[F4]),
    Kind.CHUNK_DOWN: Message(Kind.CHUNK_DOWN, key=1, flags=Flag.QUEUED,
                             meta={"part": [0, 12], "from": "eu"}, dtype=F4.dtype, frames=[F4]),
    Kind.POLICY: Message(Kind.POLICY, meta={"policy": star_policy(["eu", "us"], "us").to_json()}),
    Kind.PROBE_REQUEST: Message(Kind.PROBE_REQUEST, meta=ProbeRequest().to_json()),
    Kind.PROBE: Message(Kind.PROBE, dtype=np.uint8, frames=[np.zeros(8, np.uint8)]),
    Kind.PROBE_REPORT: Message(Kind.PROBE_REPORT, meta={"rates": {"us": 0.0, "ap": 93.5}}),
    Kind.RELAY: Message(Kind.RELAY, key=1, dtype=F4.dtype, frames=[F4],
                        meta={"part": [6, 12], "from": "eu", "to": "us", "kind": 20, "hops": 1}),
    Kind.ROUTES: Message(Kind.ROUTES, meta={"relays": [["eu", "us", "ap", 0.25]],
                                            "rates": [["eu", "us", 100.0]]}),
    Kind.ROUND_OPEN: Message(Kind.ROUND_OPEN, seq=5),
    Kind.UPDATE: Message(Kind.UPDATE, key=1, seq=3, meta={"origin": "eu"}, dtype=F4.dtype,
                         frames=[F4]),
    Kind.WORKER_LEFT: Message(Kind.WORKER_LEFT, meta={"rank": 1, "pushes": [[0, 8]],
                                                      "who": "worker rank 1"}),
    Kind.ERROR: Message(Kind.ERROR, meta={"reason": "key 3 has not been initialized"}),
    Kind.NODE_MOVED: Message(Kind.NODE_MOVED, meta={"node": {
        "id": 4, "role": "worker", "dc": "eu", "address": "tcp://h:5", "rank": 1,
        "local_rank": 1, "host": "h", "local_address": ""}}),
    Kind.RESUME: Message(Kind.RESUME, request=3),
    Kind.RESUMED: Message(Kind.RESUMED, request=3, meta={"pushed": [[0, 12], [1, 11]]}),
    Kind.RECOVER: Message(Kind.RECOVER, meta={"dc": "eu", "version": 4}),
    Kind.STATE_REPORT: Message(Kind.STATE_REPORT, meta={"keys": [[0, 12, "0f" * 32]]}),
    Kind.REPLAY: Message(Kind.REPLAY, meta={
        "policy": {"version": 4, "start_round": 12,
                   "trees": [{"root": "eu", "parent": {"eu": None, "us": "eu"},
                              "down": {"eu": None, "us": "eu"}}]},
        "keys": [[0, 11, ["us", "ap"], "0f" * 32]], "opened": 12}),
    Kind.STATE_REQUEST: Message(Kind.STATE_REQUEST, meta={"keys": [0, 1]}),
    Kind.STATE: Message(Kind.STATE, meta={
        "keys": [[0, 11, [3], "<f4", False, "0f" * 32]], "spec": None, "states": None},
        dtype=np.uint8, frames=[np.zeros(12, np.uint8)], flags=Flag.QUEUED),   # it may wait
    Kind.RECOVERED: Message(Kind.RECOVERED),
    Kind.QUORUM_READY: Message(Kind.QUORUM_READY, meta={"through": 3}),
    Kind.QUORUM: Message(Kind.QUORUM, meta={"weights": {"eu": 2, "us": 4}}),
    Kind.LINK_KEY: Message(Kind.LINK_KEY, meta={"epoch": 1, "cipher": "aegis256"},
                           dtype=np.uint8, frames=[np.zeros(32, np.uint8)]),
    Kind.LINK_KEY_DONE: Message(Kind.LINK_KEY_DONE, meta={
        "epoch": 1, "address": "tcp://10.0.0.2:7001", "max_frame": 1 << 20}),
    Kind.BATCH: Message(Kind.BATCH, dtype=np.uint8, frames=[F4], meta={"items": [
        [int(Kind.PUSH), 1, 2, 3, int(Flag.WANT_VALUE), 1, 1, {}],
        [int(Kind.PULL), 4, 2, 5, 0, 0, 0, {}]]}),
}


def roundtrip(msg: Message) -> Message:
    return wire.decode([bytes(f) for f in wire.encode(msg)])


def test_every_kind_has_a_schema_and_a_valid_example():
    assert set(kinds.SCHEMAS) == set(Kind) == set(VALID)


@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.name)
def test_a_valid_message_of_every_kind_passes(kind):
    msg = roundtrip(VALID[kind])
    assert kinds.validate(msg) is msg


def test_messages_as_the_nodes_build_them_pass():
    """A worker's INIT without a value (dtype, no frame), empty heartbeats and BYEs."""
    for msg in [Message(Kind.INIT, key=2, seq=1, meta={"shape": [3], "dtype": "<f4"},
                        dtype=np.float32),
                Message(Kind.HEARTBEAT), Message(Kind.ROUTES, meta={"relays": [], "rates": []}),
                Message(Kind.STATES, meta={"states": [], "counts": [], "num_update": 0},
                        dtype=np.uint8),
                Message(Kind.INIT, key=2, seq=1, flags=Flag.HAS_VALUE | Flag.QUEUED,
                        meta={"shape": [0], "dtype": "<f8"}, dtype=np.float64,
                        frames=[np.zeros(0)])]:
        kinds.validate(roundtrip(msg))


def mutated(kind, change) -> Message:
    msg = roundtrip(VALID[kind])
    msg.meta = copy.deepcopy(msg.meta)
    change(msg)
    return msg


def _set(path, value):
    """A change setting ``meta[path[0]][path[1]]... = value``."""
    def change(msg):
        node = msg.meta
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value
    return change


def _drop(name):
    return lambda msg: msg.meta.pop(name)


@pytest.mark.parametrize("kind,change,reason", [
    # wrong types, one per spec type
    (Kind.HEARTBEAT, _set(["round"], "7"), r"HEARTBEAT: meta.round must be an integer"),
    (Kind.HEARTBEAT, _set(["round"], True), r"meta.round must be an integer"),
    (Kind.HEARTBEAT, _set(["round"], 1.5), r"meta.round must be an integer"),
    (Kind.HEARTBEAT, _set(["links", "us"], [1.0]), r"meta.links\['us'\] must be a list of 2"),
    (Kind.HEARTBEAT, _set(["links"], [1, 2]), r"meta.links must be an object"),
    (Kind.HEARTBEAT, _set(["stalled"], "us"), r"meta.stalled must be a list"),
    (Kind.BYE, _set(["clean"], 1), r"BYE: meta.clean must be true or false"),
    (Kind.SET_OPTIMIZER, _set(["spec", "name"], 7), r"meta.spec.name must be a string"),
    (Kind.SET_OPTIMIZER, _set(["spec", "attrs", "lr"], {"x": 1}), r"meta.spec.attrs\['lr'\]"),
    (Kind.SET_OPTIMIZER, _set(["spec", "lr_mult"], [[0, "x"]]), r"meta.spec.lr_mult\[0\]\[1\]"),
    (Kind.SET_OPTIMIZER, _set(["spec", "lr_scheduler"], []), r"meta.spec.lr_scheduler must be"),
    (Kind.ROUTES, _set(["relays"], 5), r"ROUTES: meta.relays must be a list"),
    (Kind.ROUTES, _set(["relays", 0], ["eu", "us", 3, 0.2]), r"meta.relays\[0\]\[2\] must be a s"),
    (Kind.ROUTES, _set(["rates", 0, 2], "fast"), r"meta.rates\[0\]\[2\] must be a finite"),
    (Kind.PROBE_REPORT, _set(["rates", "us"], None), r"meta.rates\['us'\] must be a finite"),
    (Kind.WELCOME, _set(["nodes", 1, "id"], "1"), r"meta.nodes\[1\].id must be an integer"),
    (Kind.WELCOME, _set(["policy", "trees", 0, "parent"], []), r"parent must be an object"),
    (Kind.WELCOME, _set(["policy", "trees", 0, "down"], {"us": 3}), r"down\['us'\] must be"),
    (Kind.WELCOME, _set(["settings"], [1]), r"WELCOME: meta.settings must be an object"),
    (Kind.PROBE_REQUEST, _set(["timeout_s"], "1"), r"PROBE_REQUEST: meta: ProbeRequest: "
                                                   r"timeout_s must be a number"),
    (Kind.REGISTER, _set(["local_index"], "0"), r"meta.local_index must be an integer"),
    (Kind.ERROR, _set(["reason"], ["x"]), r"ERROR: meta.reason must be a string"),
    # ranges
    (Kind.HEARTBEAT, _set(["round"], -1), r"meta.round must be an integer in \[0, "),
    (Kind.HEARTBEAT, _set(["links", "us"], [-3.0, 0.0]), r"meta.links\['us'\]\[0\] must be a "
                                                          r"number in \[0.0, None\]"),
    (Kind.ROUTES, _set(["relays", 0, 3], 1.5), r"meta.relays\[0\]\[3\] must be a number in"),
    (Kind.RELAY, _set(["kind"], 12), r"RELAY: meta.kind must be one of \[20, 21\]"),
    (Kind.RELAY, _set(["hops"], 1000), r"meta.hops must be an integer in \[0, 255\]"),
    (Kind.CHUNK_DOWN, _set(["part"], [0, 0]), r"meta.part\[1\] must be an integer in \[1, "),
    (Kind.PROBE_REQUEST, _set(["probe_bytes"], 1 << 40), r"probe_bytes must be <= "),
    (Kind.INIT, _set(["shape"], [2, -3]), r"INIT: meta.shape\[1\] must be an integer in \[0, "),
    (Kind.INIT, _set(["shape"], [1] * 33), r"meta.shape must be a list of at most 32 items"),
    (Kind.INIT, _set(["dtype"], "object"), r"meta.dtype must be one of"),
    (Kind.INIT, _set(["dtype"], "|O"), r"meta.dtype must be one of"),
    (Kind.INIT, _set(["stype"], "csr"), r"meta.stype must be one of \[.row_sparse.\]"),
    (Kind.REGISTER, _set(["dc"], "x" * 5000), r"meta.dc must be a string of at most 1024"),
    (Kind.POLICY, _set(["policy", "version"], 1 << 40), r"meta.policy.version must be an int"),
    # required and unknown fields
    (Kind.HEARTBEAT, _set(["evil"], 1), r"HEARTBEAT: meta has unknown field 'evil'"),
    (Kind.PUSH, _set(["shape"], [6]), r"PUSH: meta has unknown field 'shape'"),
    (Kind.INIT, _drop("shape"), r"INIT: meta lacks required field 'shape'"),
    (Kind.POLICY, _drop("policy"), r"POLICY: meta lacks required field 'policy'"),
    (Kind.RELAY, _drop("to"), r"RELAY: meta lacks required field 'to'"),
    (Kind.WELCOME, _drop("settings"), r"meta lacks required field 'settings'"),
    (Kind.SET_OPTIMIZER, _drop("spec"), r"meta lacks required field 'spec'"),
    (Kind.REGISTER, _drop("address"), r"meta lacks required field 'address'"),
    (Kind.PROBE_REQUEST, _drop("timeout_s"), r"missing field 'timeout_s'"),
    (Kind.STATES, _drop("num_update"), r"STATES: meta lacks required field 'num_update'"),
    (Kind.ABORT, _set(["left"], "yes"), r"ABORT: meta.left must be"),
    # constraints between meta, header and frames
    (Kind.INIT, _set(["shape"], [7]), r"INIT: frame of 24 bytes, meta.shape \[7\] of float32 "
                                      r"needs 28"),
    (Kind.INIT, _set(["dtype"], "<f8"), r"INIT: header dtype float32 differs from meta.dtype"),
    (Kind.INIT, _set(["shape"], [1 << 40]), r"INIT: meta.shape \[1099511627776\] exceeds the "
                                            r"largest frame"),
    (Kind.STATES, _set(["states", 0, 1, "frame"], 9), r"meta.states\[0\]\[1\].frame must be"),
    (Kind.STATES, _set(["states", 0, 1, "shape"], [3, 3]), r"meta.states\[0\]\[1\]: frame 0 "
                                                           r"does not hold 36 bytes"),
    (Kind.STATES, _set(["states", 0, 1, "dtype"], "object"), r"meta.states\[0\]\[1\].dtype"),
    (Kind.LOAD_STATES, _set(["states", 1, 1, "seq", 1, "num"], {}), r"seq\[1\].num must be"),
])
def test_each_violation_is_rejected_naming_the_field(kind, change, reason):
    with pytest.raises(schema.SchemaError, match=reason):
        kinds.validate(mutated(kind, change))


@pytest.mark.parametrize("msg,reason", [
    (Message(Kind.PUSH, key=1, dtype=F4.dtype, frames=[F4, F4]), r"PUSH: 2 tensor frames, "
                                                                r"expected 1"),
    (Message(Kind.PUSH, key=1, dtype=F4.dtype), r"PUSH: 0 tensor frames, expected 1"),
    (Message(Kind.VALUE, key=1, dtype=F4.dtype), r"VALUE: 0 tensor frames"),
    (Message(Kind.HEARTBEAT, dtype=F4.dtype), r"HEARTBEAT: the header names dtype float32"),
    (Message(Kind.PULL, dtype=F4.dtype, frames=[F4]), r"PULL: 1 tensor frames, expected 0"),
    (Message(Kind.INIT, key=1, meta={"shape": [6], "dtype": "<f4"}, dtype=F4.dtype,
             frames=[F4]), r"INIT: 1 frames, none expected with HAS_VALUE unset"),
    (Message(Kind.INIT, key=1, flags=Flag.HAS_VALUE, meta={"shape": [6], "dtype": "<f4"},
             dtype=F4.dtype), r"INIT: 0 frames, one expected with HAS_VALUE set"),
    (Message(Kind.PUSH, key=1, flags=Flag.HAS_VALUE, dtype=F4.dtype, frames=[F4]),
     r"PUSH: flags 0x2 not allowed"),
    (Message(Kind.ABORT, flags=Flag(64)), r"ABORT: flags 0x40 not allowed"),
])
def test_frames_dtype_and_flags_are_checked_per_kind(msg, reason):
    with pytest.raises(schema.SchemaError, match=reason):
        kinds.validate(roundtrip(msg))


def test_a_schema_error_is_a_wire_error():
    """The Van drops both alike."""
    assert issubclass(schema.SchemaError, wire.WireError)


def test_only_kinds_whose_meta_grows_with_the_cluster_or_model_may_be_large():
    large = {k for k, limit in kinds.META_LIMITS.items() if limit > schema.SMALL_META_BYTES}
    assert set(kinds.META_LIMITS) == set(Kind)
    assert large == {Kind.WELCOME, Kind.HEARTBEAT, Kind.ABORT, Kind.BYE, Kind.WORKER_LEFT,
                     Kind.SET_OPTIMIZER, Kind.STATES, Kind.LOAD_STATES, Kind.POLICY,
                     Kind.PROBE_REPORT, Kind.ROUTES, Kind.ERROR, Kind.RESUMED,
                     Kind.STATE_REPORT, Kind.REPLAY, Kind.STATE_REQUEST, Kind.STATE,
                     Kind.REGISTER,     # a report to a new scheduler: its DC's workers
                     Kind.QUORUM}       # a weight per DC
    assert max(kinds.META_LIMITS.values()) == wire.MAX_META_BYTES


def test_a_push_or_value_in_shared_memory_has_no_frame_and_is_never_compressed():
    shared = [Message(Kind.PUSH, key=1, dtype=F4.dtype,
                      flags=Flag.SHARED | Flag.WANT_VALUE | Flag.REPLY_SHARED),
              Message(Kind.VALUE, key=1, dtype=F4.dtype, flags=Flag.SHARED),
              Message(Kind.PULL, key=1, flags=Flag.REPLY_SHARED)]
    for msg in shared:
        assert kinds.validate(roundtrip(msg)).flags == msg.flags
    with pytest.raises(schema.SchemaError, match=r"PUSH: 1 tensor frames, expected 0"):
        kinds.validate(roundtrip(Message(Kind.PUSH, key=1, dtype=F4.dtype, frames=[F4],
                                          flags=Flag.SHARED)))
    with pytest.raises(schema.SchemaError, match=r"PUSH: SHARED and ENCODED together"):
        kinds.validate(roundtrip(Message(Kind.PUSH, key=1, dtype=F4.dtype,
                                          flags=Flag.SHARED | Flag.ENCODED)))
    with pytest.raises(schema.SchemaError, match=r"PULL: flags 0x10 not allowed"):
        kinds.validate(roundtrip(Message(Kind.PULL, key=1, flags=Flag.SHARED)))
    with pytest.raises(schema.SchemaError, match=r"INIT_DONE: meta.shared must be"):
        kinds.validate(roundtrip(Message(Kind.INIT_DONE, meta={"shared": 1})))


def test_link_key_frame_is_32_bytes_of_uint8():
    good = VALID[Kind.LINK_KEY]
    kinds.validate(roundtrip(good))
    for dtype, size in ((np.uint8, 31), (np.uint8, 33), (np.int8, 32)):
        bad = Message(Kind.LINK_KEY, meta=good.meta, dtype=np.dtype(dtype),
                      frames=[np.zeros(size, dtype)])
        with pytest.raises(schema.SchemaError, match="LINK_KEY: the key frame"):
            kinds.validate(roundtrip(bad))
    for meta in ({"epoch": 0, "cipher": "aegis256"}, {"epoch": 1, "cipher": "chacha"},
                 {"epoch": 1}):
        with pytest.raises(schema.SchemaError):
            kinds.validate(roundtrip(Message(Kind.LINK_KEY, meta=meta, dtype=np.uint8,
                                             frames=[np.zeros(32, np.uint8)])))
