"""netstorm.geoserver.core.kinds: one row per message kind, each with a schema, its routes
and a handler on every role its routes dispatch to, which exists on that role's class; and
roles' checks (geoserver/core/roles.py) agree with the routes."""
import itertools

import pytest

from netstorm.geoserver.core import kinds, roles
from netstorm.geoserver.core.kinds import KINDS, KindSpec, handlers_for
from netstorm.geoserver.core.nodes import SCHEDULER, SERVER, WORKER, NodeInfo, NodeTable
from netstorm.geoserver.core.schema import MessageSchema
from netstorm.geoserver.core.wire import Kind, Message
from netstorm.geoserver.server.geoserver import GeoServer
from netstorm.geoserver.worker.client import WorkerClient
from netstorm.scheduler.service import Scheduler

CLASSES = {SERVER: GeoServer, WORKER: WorkerClient, SCHEDULER: Scheduler}
TABLE = NodeTable([NodeInfo(0, "scheduler", "", "tcp://s"),
                   NodeInfo(1, "server", "eu", "tcp://e"),
                   NodeInfo(2, "server", "us", "tcp://u"),
                   NodeInfo(3, "worker", "eu", "tcp://w3", 0, 0),
                   NodeInfo(4, "worker", "us", "tcp://w4", 1, 0),
                   NodeInfo(5, "worker", "eu", "tcp://w5", 2, 1)])


def test_every_kind_has_exactly_one_row_with_a_schema_and_a_route():
    assert sorted(KINDS) == sorted(Kind)
    for kind, spec in KINDS.items():
        assert isinstance(spec, KindSpec) and spec.kind == kind
        assert isinstance(spec.schema, MessageSchema), kind
        assert spec.routes, f"{kind.name} has no route"
        assert all(r.to in CLASSES and r.check in (kinds.ADMITTED, kinds.REGISTERING,
                                                   kinds.WELCOMING, kinds.CARRIED)
                   for r in spec.routes), kind


@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.name)
def test_a_kind_has_a_handler_on_exactly_the_roles_its_routes_dispatch_to(kind):
    spec = KINDS[kind]
    assert set(spec.handlers) == {r.to for r in spec.routes if r.dispatched}


@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.name)
def test_every_declared_handler_is_a_method_of_its_roles_class(kind):
    for role, name in KINDS[kind].handlers.items():
        assert callable(getattr(CLASSES[role], name, None)), \
            f"{CLASSES[role].__name__}.{name} ({kind.name})"


def test_handlers_for_binds_each_kind_once_and_names_a_missing_handler():
    class Worker:
        def __init__(self, missing=()):
            for name in {n for s in KINDS.values() for r, n in s.handlers.items()
                         if r == WORKER and n not in missing}:
                setattr(self, name, lambda msg, name=name: name)

    handlers = handlers_for(WORKER, Worker())
    assert set(handlers) == {k for k, s in KINDS.items() if WORKER in s.handlers}
    assert handlers[Kind.VALUE](None) == KINDS[Kind.VALUE].handlers[WORKER]
    with pytest.raises(TypeError, match="Worker has no handler _on_abort for ABORT"):
        handlers_for(WORKER, Worker(missing=("_on_abort",)))


def test_only_a_register_comes_before_the_table():
    assert {k for k, s in KINDS.items() if s.before_table} == {Kind.REGISTER}


def test_a_batch_carries_exactly_the_fusible_kinds_and_is_never_dispatched():
    choices = KINDS[Kind.BATCH].schema.meta.fields["items"].item.items[0].choices
    assert choices == {int(k) for k in kinds.FUSIBLE}
    assert kinds.FUSIBLE == {Kind.PUSH, Kind.PULL, Kind.VALUE, Kind.CHUNK_UP, Kind.CHUNK_DOWN}
    assert not KINDS[Kind.BATCH].handlers


def test_the_wan_times_chunks_relays_and_probes_itself():
    assert {k for k, s in KINDS.items() if s.timed_by_wan} == \
        {Kind.PROBE, Kind.CHUNK_UP, Kind.CHUNK_DOWN, Kind.RELAY}


def routed(me: NodeInfo, sender: NodeInfo, kind: Kind) -> bool:
    """Whether a route of ``kind`` lets ``me`` take it from ``sender`` after the WELCOME."""
    how = roles.relation(me, sender)
    return any(r.check == kinds.ADMITTED and r.to == me.role and r.sender == how and
               r.role in (None, sender.role) for r in KINDS[kind].routes)


@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.name)
def test_roles_admit_exactly_what_the_routes_declare(kind):
    admitted = 0
    for me, sender in itertools.product(TABLE.nodes.values(), repeat=2):
        msg = Message(kind, sender=sender.id, origin=sender.dc)
        assert (roles.refusal(TABLE, me, msg) == "") == routed(me, sender, kind), \
            (me.describe(), sender.describe())
        admitted += routed(me, sender, kind)
    checks = {r.check for r in KINDS[kind].routes}
    assert (admitted > 0) == (kinds.ADMITTED in checks)


@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.name)
def test_before_the_welcome_only_the_answers_to_a_register_need_the_schedulers_key(kind):
    welcoming = any(r.check == kinds.WELCOMING for r in KINDS[kind].routes)
    refused = roles.welcome_refusal(Message(kind, origin="eu")) != ""
    assert refused == welcoming
    assert roles.welcome_refusal(Message(kind, origin="")) == ""


def test_every_kind_servers_send_each_other_may_carry_the_queued_mark():
    """What one server sends another passes a send queue, which marks what waited QUEUED
    (send_queue.py, and the compiled data plane's queues): a kind refusing the mark would
    be dropped whenever a link is busy (LINK_KEY_DONE once was)."""
    from netstorm.geoserver.core.kinds import KINDS
    from netstorm.geoserver.core.roles import FROM_OTHER_SERVER
    from netstorm.geoserver.core.wire import Flag, Kind
    peer_kinds = [kind for kind, spec in KINDS.items()
                  if any(route.sender == FROM_OTHER_SERVER for route in spec.routes)]
    assert len(peer_kinds) >= 8
    for kind in peer_kinds:
        if kind != Kind.BATCH:      # made as it leaves a queue, never waits in one
            assert KINDS[kind].schema.flags & Flag.QUEUED, kind.name
