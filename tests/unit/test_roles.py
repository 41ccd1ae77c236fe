"""Who may send what (geoserver/core/roles.py): the claimed sender must be a node of the table,
of the principal whose key sent it, allowed to send that kind to the receiving node."""
import pytest

from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
from netstorm.geoserver.core.roles import refusal, register_refusal, welcome_refusal
from netstorm.geoserver.core.wire import Kind, Message

TABLE = NodeTable([NodeInfo(0, "scheduler", "", "tcp://s"),
                   NodeInfo(1, "server", "eu", "tcp://e"),
                   NodeInfo(2, "server", "us", "tcp://u"),
                   NodeInfo(3, "worker", "eu", "tcp://w3", 0, 0),
                   NodeInfo(4, "worker", "us", "tcp://w4", 1, 0)])
SCHED, EU, US, EU_WORKER, US_WORKER = (TABLE[i] for i in range(5))


def msg(kind, sender, origin):
    return Message(kind, sender=sender, origin=origin)


@pytest.mark.parametrize("me, kind, sender, origin", [
    (EU, Kind.POLICY, 0, ""), (EU, Kind.ABORT, 0, ""), (EU, Kind.SHUTDOWN, 0, ""),
    (EU, Kind.ROUTES, 0, ""), (EU, Kind.ROUND_OPEN, 0, ""), (EU, Kind.PROBE_REQUEST, 0, ""),
    (EU, Kind.CHUNK_UP, 2, "us"), (EU, Kind.CHUNK_DOWN, 2, "us"), (EU, Kind.RELAY, 2, "us"),
    (EU, Kind.PROBE, 2, "us"), (EU, Kind.INIT, 2, "us"),
    (EU, Kind.PUSH, 3, "eu"), (EU, Kind.INIT, 3, "eu"), (EU, Kind.SET_OPTIMIZER, 3, "eu"),
    (EU_WORKER, Kind.VALUE, 1, "eu"), (EU_WORKER, Kind.ERROR, 1, "eu"),
    (EU_WORKER, Kind.ABORT, 0, ""), (EU_WORKER, Kind.BARRIER_DONE, 0, ""),
    (SCHED, Kind.HEARTBEAT, 1, "eu"), (SCHED, Kind.HEARTBEAT, 4, "us"),
    (SCHED, Kind.ABORT, 2, "us"), (SCHED, Kind.PROBE_REPORT, 1, "eu"),
    (SCHED, Kind.BARRIER, 3, "eu"), (SCHED, Kind.BYE, 4, "us"),
    (EU, Kind.CHUNK_UP, 2, None),            # without CURVE the claim is all there is
])
def test_what_the_protocol_sends_is_admitted(me, kind, sender, origin):
    assert refusal(TABLE, me, msg(kind, sender, origin)) == ""


@pytest.mark.parametrize("me, kind, sender, origin, reason", [
    # another DC's key speaking as this DC's server, the scheduler or a worker
    (US, Kind.CHUNK_UP, 1, "us", "claims to come from server of eu (node 1) but was sent "
                                 "with the key of DC us"),
    (EU, Kind.ABORT, 0, "us", "claims to come from scheduler (node 0) but was sent with the "
                              "key of DC us"),
    (EU, Kind.SET_OPTIMIZER, 3, "us", "but was sent with the key of DC us"),
    (SCHED, Kind.BYE, 3, "us", "but was sent with the key of DC us"),
    # nobody at all
    (EU, Kind.PUSH, 4242, "eu", "node 4242, which is not in the cluster"),
])
def test_forged_or_misplaced_messages_are_refused_with_the_reason(me, kind, sender, origin,
                                                                  reason):
    assert reason in refusal(TABLE, me, msg(kind, sender, origin))


# a real node, with its own key, sending what its role may not (receiver, kind, sender, key)
MISPLACED = [(EU, Kind.SHUTDOWN, 2, "us"), (EU, Kind.POLICY, 3, "eu"), (EU, Kind.ABORT, 3, "eu"),
             (EU, Kind.PUSH, 4, "us"), (EU, Kind.CHUNK_UP, 1, "eu"), (EU, Kind.CHUNK_UP, 3, "eu"),
             (EU_WORKER, Kind.VALUE, 2, "us"), (EU_WORKER, Kind.ABORT, 1, "eu"),
             (SCHED, Kind.BARRIER, 1, "eu"), (SCHED, Kind.PROBE_REPORT, 3, "eu"),
             (SCHED, Kind.POLICY, 1, "eu"), (EU_WORKER, Kind.WORKER_LEFT, 1, "eu"),
             (EU_WORKER, Kind.WORKER_LEFT, 4, "us")]


@pytest.mark.parametrize("me, kind, sender, origin", MISPLACED)
def test_a_real_node_sending_what_its_role_may_not_is_refused(me, kind, sender, origin):
    assert refusal(TABLE, me, msg(kind, sender, origin)) == \
        f"{TABLE.describe(sender)} may not send {kind.name} to {me.describe()}"


def test_before_the_welcome_only_the_schedulers_key_answers_a_registration():
    for kind in (Kind.WELCOME, Kind.ERROR, Kind.ABORT):
        assert welcome_refusal(msg(kind, 0, "")) == ""
        assert welcome_refusal(msg(kind, 0, None)) == ""
        assert "key of DC us, not the scheduler's" in welcome_refusal(msg(kind, 0, "us"))
    assert welcome_refusal(msg(Kind.CHUNK_UP, 2, "us")) == ""   # kept, judged with the table


def test_a_registration_names_the_dc_of_its_key():
    assert register_refusal({"role": "worker", "dc": "eu"}, "eu") == ""
    assert register_refusal({"role": "worker", "dc": "eu"}, None) == ""
    assert register_refusal({"role": "server", "dc": "eu"}, "us") == \
        "registration as a server of DC 'eu' was sent with the key of DC us"
    assert "key of the scheduler" in register_refusal({"role": "server", "dc": "eu"}, "")
