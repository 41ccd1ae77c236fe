"""One declaration per message kind, as ps-lite's ``meta.proto``: the table :data:`KINDS`.

For every :class:`~netstorm.geoserver.core.wire.Kind` one :class:`KindSpec` says what it
may carry (its :class:`~netstorm.geoserver.core.schema.MessageSchema`), who may send it to
whom (its :class:`Route` s, from which :mod:`.roles` derives its checks), which method takes
it on each receiving role (``handlers``: role -> method name on :class:`GeoServer`,
:class:`WorkerClient` or :class:`Scheduler`) and its per-kind facts (``fusible``: a BATCH may
carry it; ``timed_by_wan``: the WAN transport times its arrival itself). Adding a kind is the
enum, one row here and one handler. :func:`handlers_for` turns the names into a dispatch
dict once, at construction; :func:`validate` checks one message against its kind's schema.
Pure: no sockets, no clock. Lookups are O(1).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..config.settings import ProbeRequest
from ..config.sync import MAX_COUNT
from .nodes import SCHEDULER, SERVER, WORKER
from .schema import (CHUNK_META, DATA, DIGEST, EMPTY, I64, KEY_DTYPES, KEY_STATE,
                     MAX_BATCH_MESSAGES, MAX_DIMS, MAX_WAITS, NODE, OPTIMIZER_SPEC, POLICY,
                     PUSHED, PUSHES,
                     REASON, RELAY_META, STATES, U16, U32, U64, AnyObj, Bool, Decoded, DictOf, Int,
                     ListOf, MessageSchema, Nullable, Num, Obj, Row, Str, check, check_batch,
                     check_init, check_link_key, check_replica, check_states, not_shared_and_encoded)
from .shared_memory import MAX_FD as MAX_SHM_FD
from .wire import DTYPES, MAX_META_BYTES, Flag, Kind, Message

__all__ = ["ADMITTED", "CARRIED", "FROM_NODE", "FROM_OTHER_SERVER", "FROM_OWN_SERVER",
           "FROM_OWN_WORKER", "FROM_SCHEDULER", "FUSIBLE", "KINDS", "KindSpec", "META_LIMITS",
           "REGISTERING", "Route", "SCHEMAS", "WELCOMING", "handlers_for", "validate"]

AUDIT_ROWS = 512            # replica digests a server's heartbeat carries at most

# how a sender relates to the receiving node (roles.relation)
FROM_SCHEDULER = "the scheduler"
FROM_OWN_SERVER = "this DC's server"
FROM_OWN_WORKER = "a worker of this DC"
FROM_OTHER_SERVER = "another DC's server"
FROM_NODE = "a node"                     # anything but the scheduler, at the scheduler

# when a route's messages are checked, and who takes them
ADMITTED = "admitted"       # after the WELCOME: roles.refusal, then the role's handler
REGISTERING = "registering"  # before the sender has an id: roles.register_refusal, handler
WELCOMING = "welcoming"     # the answer to a REGISTER: roles.welcome_refusal, the Postoffice
CARRIED = "carried"         # an envelope the Van takes apart; what it carries is checked


@dataclass(frozen=True)
class Route:
    """Role ``to`` takes the kind from a sender in relation ``sender`` to it; ``role``
    narrows that sender to one role (at the scheduler, where every node is ``FROM_NODE``)."""

    to: str
    sender: str
    role: str | None = None
    check: str = ADMITTED

    @property
    def dispatched(self) -> bool:
        """Whether a handler of role ``to`` takes these messages."""
        return self.check in (ADMITTED, REGISTERING)


@dataclass(frozen=True, eq=False)
class KindSpec:
    """Everything about one kind (see the module doc)."""

    kind: Kind
    schema: MessageSchema
    routes: tuple
    handlers: dict = field(default_factory=dict)
    fusible: bool = False
    timed_by_wan: bool = False

    @property
    def before_table(self) -> bool:
        """Sent before its sender is a node of the table (a REGISTER)."""
        return any(route.check == REGISTERING for route in self.routes)


def _spec(kind, schema=EMPTY, *routes, handler="", **facts) -> KindSpec:
    """A row: every receiving role of a dispatched route takes it with ``handler`` unless
    ``facts`` names ``handlers`` per role."""
    handlers = facts.pop("handlers", None) or \
        {r.to: handler for r in routes if r.dispatched and handler}
    return KindSpec(kind, schema, tuple(routes), handlers, **facts)


_SCHED = (Route(SERVER, FROM_SCHEDULER),)
_BOTH_SCHED = (Route(SERVER, FROM_SCHEDULER), Route(WORKER, FROM_SCHEDULER))
_TO_SCHED, _WORKER_TO_SCHED, _SERVER_TO_SCHED = (Route(SCHEDULER, FROM_NODE),), \
    (Route(SCHEDULER, FROM_NODE, WORKER),), (Route(SCHEDULER, FROM_NODE, SERVER),)
_REQUEST = (Route(SERVER, FROM_OWN_WORKER),)
_REPLY = (Route(WORKER, FROM_OWN_SERVER),)
_PEER = (Route(SERVER, FROM_OTHER_SERVER),)
_WELCOMING = (Route(SERVER, FROM_SCHEDULER, check=WELCOMING),
              Route(WORKER, FROM_SCHEDULER, check=WELCOMING))
_CHUNK = MessageSchema(CHUNK_META, frames=(1, 1), dtype="required",
                       flags=Flag.QUEUED | Flag.ENCODED)
# what a node tells a new scheduler of itself (scheduler/rebuild.py)
REBUILD_REPORT = Obj({
    "node": NODE, "policies": ListOf(POLICY, max_len=255), "round": Int(0, I64),
    "opened": Int(0, I64), "requested": Int(0, I64), "finished": ListOf(Int(0, U32)),
    "workers": ListOf(NODE, max_len=U16), "keys": ListOf(Row(Int(0, U32), Int(0, I64)))},
    required=("node",))
_STATES = MessageSchema(STATES, frames=(0, None), dtype="optional", check=check_states,
                        max_meta_bytes=MAX_META_BYTES)

_ROWS = [
    _spec(Kind.REGISTER, MessageSchema(Obj({
        "role": Str(64), "dc": Str(), "address": Str(), "host": Str(), "pid": Int(0, U32),
        "local_index": Int(-1, U32), "local_address": Str(),
        # a node re-registering with a new scheduler (scheduler/rebuild.py)
        "report": REBUILD_REPORT},
        required=("role", "dc", "address")), max_meta_bytes=MAX_META_BYTES),
        Route(SCHEDULER, FROM_NODE, check=REGISTERING), handler="_on_register"),
    _spec(Kind.WELCOME, MessageSchema(Obj({
        "nodes": ListOf(NODE, max_len=U16), "you": Int(0, U16), "policy": Nullable(POLICY),
        # typed by RuntimeSettings.from_json in the Postoffice, whose error names the
        # field and ends the registration (a WELCOME is not retried)
        "settings": AnyObj(),
        "rejoined": Bool(),         # a worker restarted into its rank (docs/recovery.md)
        "rebuilt": Bool()},         # a new scheduler took the cluster over (rebuild.py)
        required=("nodes", "you", "settings")), max_meta_bytes=MAX_META_BYTES), *_WELCOMING,
        *_BOTH_SCHED, handler="_on_welcome"),   # admitted: a new scheduler's, while running
    _spec(Kind.BARRIER, EMPTY, *_WORKER_TO_SCHED, handler="_on_barrier"),
    _spec(Kind.BARRIER_DONE, EMPTY, Route(WORKER, FROM_SCHEDULER), handler="_on_barrier_done"),
    _spec(Kind.HEARTBEAT, MessageSchema(Obj({
        "round": Int(), "stalled": ListOf(Str()), "links": DictOf(Row(Num(0.0), Num(0.0))),
        "step_s": Num(0.0, 1e6), "model_bytes": Int(0, 1 << 50),
        # a server's replica digests: [key, round, SHA-256, optimizer updates or -1]
        # (server/replica_digest.py, scheduler/replica_audit.py)
        "audit": ListOf(Row(Int(0, I64), Int(1, U32), DIGEST, Int(-1, I64)),
                        max_len=AUDIT_ROWS),
        # a worker's data path, the scheduler's answer (worker/progress.py, scheduler/stalls.py)
        "quiet_s": Num(0.0), "round_s": Num(0.0, 1e6), "pushed": PUSHED,
        # round trips (core/failure_detector.py): the scheduler's clock and its estimate of
        # the node's round trip; the node's echo of that clock and how long it held it
        "t": Num(0.0), "rtt": Num(0.0, 1e6), "echo": Row(Num(0.0), Num(0.0, 1e6)),
        "waits": ListOf(Row(Int(-1, I64), Int(0, U32), Num(0.0)), max_len=MAX_WAITS),
        "missing": ListOf(Row(Int(-1, I64), Int(0, U32), ListOf(Str(256), max_len=U16)),
                          max_len=MAX_WAITS)}), max_meta_bytes=MAX_META_BYTES),
        *_TO_SCHED, *_BOTH_SCHED, handler="_on_heartbeat"),
    # left: the receiver's DC left the run (elastic; scheduler/departing.py); its process ends
    _spec(Kind.ABORT, MessageSchema(Obj({"reason": Str(None), "left": Bool()}),
                                    max_meta_bytes=MAX_META_BYTES),
          *_TO_SCHED, *_BOTH_SCHED, *_WELCOMING, handler="_on_abort"),
    _spec(Kind.BYE, MessageSchema(Obj({"clean": Bool(), "reason": Str(None), "pushes": PUSHES}),
                                  max_meta_bytes=MAX_META_BYTES),
          *_WORKER_TO_SCHED, handler="_on_bye"),
    _spec(Kind.SHUTDOWN, EMPTY, *_SCHED, handler="_on_shutdown"),
    _spec(Kind.INIT, MessageSchema(Obj({
        "shape": ListOf(Int(), MAX_DIMS), "dtype": Str(16, KEY_DTYPES), "origin": Str(),
        "stype": Str(16, ("row_sparse",)), "shm_fd": Int(0, MAX_SHM_FD)},
        required=("shape", "dtype")), frames=(0, 1), dtype="optional",
        flags=Flag.HAS_VALUE | Flag.QUEUED, check=check_init),
        *_REQUEST, *_PEER, handler="_on_init"),
    _spec(Kind.INIT_DONE, MessageSchema(Obj({"shared": Bool()})), *_REPLY, handler="_on_reply"),
    _spec(Kind.PUSH, MessageSchema(frames=(1, 1), dtype="required",
                                   check=not_shared_and_encoded,
                                   flags=Flag.WANT_VALUE | Flag.ENCODED | Flag.SHARED |
                                   Flag.REPLY_SHARED),
          *_REQUEST, handler="_on_request", fusible=True),
    _spec(Kind.PULL, MessageSchema(flags=Flag.REPLY_SHARED), *_REQUEST,
          handler="_on_request", fusible=True),
    _spec(Kind.VALUE, MessageSchema(Obj({"steps": Int(1, MAX_COUNT)}), frames=(1, 1),
                                    dtype="required", flags=Flag.SHARED),
          *_REPLY, handler="_on_reply", fusible=True),
    _spec(Kind.SET_OPTIMIZER, MessageSchema(Obj({"spec": OPTIMIZER_SPEC}, required=("spec",)),
                                            max_meta_bytes=MAX_META_BYTES),
          *_REQUEST, handler="_on_request"),
    _spec(Kind.OPTIMIZER_DONE, EMPTY, *_REPLY, handler="_on_reply"),
    _spec(Kind.SAVE_STATES, EMPTY, *_REQUEST, handler="_on_request"),
    _spec(Kind.STATES, _STATES, *_REPLY, handler="_on_reply"),
    _spec(Kind.LOAD_STATES, _STATES, *_REQUEST, handler="_on_request"),
    _spec(Kind.CHUNK_UP, _CHUNK, *_PEER, handler="_on_chunk", fusible=True, timed_by_wan=True),
    _spec(Kind.CHUNK_DOWN, _CHUNK, *_PEER, handler="_on_chunk", fusible=True,
          timed_by_wan=True),
    _spec(Kind.POLICY, MessageSchema(Obj({"policy": POLICY}, required=("policy",)),
                                     max_meta_bytes=MAX_META_BYTES),
          *_SCHED, handler="_on_policy"),
    _spec(Kind.PROBE_REQUEST, MessageSchema(Decoded(ProbeRequest.from_json)), *_SCHED,
          handler="_on_probe_request"),
    _spec(Kind.PROBE, DATA, *_PEER, handler="_on_probe", timed_by_wan=True),
    _spec(Kind.PROBE_REPORT, MessageSchema(Obj({"rates": DictOf(Num(0.0))}, required=("rates",)),
                                           max_meta_bytes=MAX_META_BYTES),
          *_SERVER_TO_SCHED, handler="_on_probe_report"),
    _spec(Kind.RELAY, MessageSchema(RELAY_META, frames=(1, 1), dtype="required",
                                    flags=Flag.QUEUED | Flag.ENCODED),
          *_PEER, handler="_on_chunk", timed_by_wan=True),
    _spec(Kind.ROUTES, MessageSchema(Obj({
        "relays": ListOf(Row(Str(), Str(), Str(), Num(0.0, 1.0))),
        "rates": ListOf(Row(Str(), Str(), Num(0.0)))}), max_meta_bytes=MAX_META_BYTES),
        *_SCHED, handler="_on_routes"),
    _spec(Kind.ROUND_OPEN, EMPTY, *_SCHED, handler="_on_round_open"),
    _spec(Kind.WORKER_LEFT, MessageSchema(Obj({"rank": Int(0, U32), "pushes": PUSHES,
                                               "who": Str(256)},
                                              required=("rank", "pushes", "who")),
                                          max_meta_bytes=MAX_META_BYTES),
          *_BOTH_SCHED, handler="_on_worker_left"),
    _spec(Kind.ERROR, MessageSchema(REASON, max_meta_bytes=MAX_META_BYTES),
          *_REPLY, *_WELCOMING, handler="_on_reply"),
    _spec(Kind.UPDATE, MessageSchema(Obj({"origin": Str()}, required=("origin",)),
                                     frames=(1, 1), dtype="required", flags=Flag.QUEUED),
          *_PEER, handler="_on_update"),
    _spec(Kind.NODE_MOVED, MessageSchema(Obj({"node": NODE}, required=("node",))),
          *_BOTH_SCHED, handler="_on_node_moved"),
    _spec(Kind.RESUME, EMPTY, *_REQUEST, handler="_on_request"),
    _spec(Kind.RESUMED, MessageSchema(Obj({"pushed": PUSHES, "base": Int(0, U32)},
                                          required=("pushed",)), max_meta_bytes=MAX_META_BYTES),
          *_REPLY, handler="_on_resumed"),
    # replacing a lost DC server from a peer's replica (docs/recovery.md)
    _spec(Kind.RECOVER, MessageSchema(Obj({"dc": Str(), "version": Int(0, U32),
                                           "repair": Bool(),    # a replica audit's repair
                                           # elastic: the DC joins or leaves the run
                                           "change": Str(choices=("joins", "leaves"))},
                                          required=("dc", "version"))),
          *_SCHED, handler="_on_recover"),
    _spec(Kind.STATE_REPORT, MessageSchema(Obj({"keys": ListOf(Row(Int(0, I64), Int(0, U32),
                                                                   DIGEST))}, required=("keys",)),
                                           max_meta_bytes=MAX_META_BYTES),
          *_SERVER_TO_SCHED, handler="_on_state_report"),
    _spec(Kind.REPLAY, MessageSchema(Obj({
        "policy": POLICY, "opened": Int(0, U32),
        "keys": ListOf(Row(Int(0, I64), Int(0, U32), ListOf(Str(), max_len=U16), DIGEST))},
        required=("policy", "keys")), max_meta_bytes=MAX_META_BYTES),
        *_SCHED, handler="_on_replay"),
    _spec(Kind.STATE_REQUEST, MessageSchema(Obj({"keys": ListOf(Int(0, I64)),
                                                 "version": Int(0, U32)},
                                                required=("keys",)),
                                            flags=Flag.QUEUED, max_meta_bytes=MAX_META_BYTES),
          *_PEER, handler="_on_state_request"),
    _spec(Kind.STATE, MessageSchema(Obj({
        "keys": ListOf(KEY_STATE), "spec": Nullable(OPTIMIZER_SPEC), "states": Nullable(STATES),
        "states_digest": DIGEST, "version": Int(0, U32),
        "mode": Nullable(Obj({"buffers": ListOf(Row(Int(0, I64), Str(16, KEY_DTYPES),
                                                    Int(0, U32))), "digest": DIGEST},
                             required=("buffers", "digest")))},
        required=("keys",)), frames=(0, None), dtype="optional",
        check=check_replica, flags=Flag.QUEUED, max_meta_bytes=MAX_META_BYTES),
        *_PEER, handler="_on_state"),
    _spec(Kind.RECOVERED, EMPTY, *_SERVER_TO_SCHED, handler="_on_recovered"),
    # the bulk channel's keys, over CURVE (core/bulk_channel.py, docs/security.md)
    _spec(Kind.LINK_KEY, MessageSchema(Obj({"epoch": Int(1, U32),
                                            "cipher": Str(16, ("aegis256",))},
                                           required=("epoch", "cipher")),
                                       frames=(1, 1), dtype="required", check=check_link_key,
                                       flags=Flag.QUEUED),    # it may wait in a send queue
          *_PEER, handler="_on_link_key"),
    _spec(Kind.LINK_KEY_DONE, MessageSchema(Obj({"epoch": Int(1, U32), "address": Str(256),
                                                 "max_frame": Int(64, U32)},
                                                required=("epoch", "address", "max_frame")),
                                            flags=Flag.QUEUED),
          *_PEER, handler="_on_link_key_done"),
]
_ROWS += [  # quorum rounds (hfa, diloco; docs/sync.md#quorum-rounds-not-waiting-for-a-late-dc-hfa-diloco)
    _spec(Kind.QUORUM_READY, MessageSchema(Obj({"through": Int(1, U32)}, required=("through",))),
          *_SERVER_TO_SCHED, handler="_on_quorum_ready"),
    _spec(Kind.QUORUM, MessageSchema(Obj({"weights": DictOf(Int(1, U32))},
                                         required=("weights",)), max_meta_bytes=MAX_META_BYTES),
          *_SCHED, handler="_on_quorum"),
]
FUSIBLE = frozenset(spec.kind for spec in _ROWS if spec.fusible)    # what a BATCH may carry
_ROWS.append(_spec(
    # [kind, key, seq, request, flags, dtype code, frames, meta] per message carried; each
    # is then checked against its own kind's schema (batch.unpack). Key, seq, request and
    # flags take what a header's take: a reply echoes any request id a header carried
    Kind.BATCH, MessageSchema(Obj({"items": ListOf(Row(
        Int(choices={int(k) for k in FUSIBLE}), Int(0, U32), Int(0, U64), Int(0, U64),
        Int(0, U16), Int(choices=set(DTYPES)), Int(0, 1), AnyObj()),
        max_len=MAX_BATCH_MESSAGES)}, required=("items",)),
        frames=(0, MAX_BATCH_MESSAGES), dtype="required", check=check_batch),
    Route(SERVER, FROM_OWN_WORKER, check=CARRIED), Route(WORKER, FROM_OWN_SERVER, check=CARRIED),
    Route(SERVER, FROM_OTHER_SERVER, check=CARRIED)))

KINDS = {spec.kind: spec for spec in _ROWS}
assert len(KINDS) == len(_ROWS), "a kind declared twice"
SCHEMAS = {kind: spec.schema for kind, spec in KINDS.items()}
# for wire.decode, which checks a meta frame's size before parsing it
META_LIMITS = {kind: schema.max_meta_bytes for kind, schema in SCHEMAS.items()}


def validate(msg: Message) -> Message:
    """``msg`` if its kind's schema allows it; else
    :class:`~netstorm.geoserver.core.schema.SchemaError` saying why."""
    return check(SCHEMAS[msg.kind], msg)


def handlers_for(role: str, obj) -> dict:
    """``{kind: bound method}`` of ``obj`` for every kind ``role`` takes; built once, at
    ``obj``'s construction. Raises :class:`TypeError` naming a declared handler ``obj``
    lacks. O(kinds)."""
    handlers = {}
    for kind, spec in KINDS.items():
        name = spec.handlers.get(role)
        if name is None:
            continue
        method = getattr(obj, name, None)
        if not callable(method):
            raise TypeError(f"{type(obj).__name__} has no handler {name} for {kind.name}, "
                            f"which geoserver/core/kinds.py declares for the {role}")
        handlers[kind] = method
    return handlers
