"""netstorm.geoserver.server.worker_requests: a local worker's request waits for the first
policy (in order, a bounded number), for its round behind the round gate, or goes on to the
store; what the store or the limits refuse is answered with ERROR naming why."""
import logging

import numpy as np

from fakes import init_message, push_message
from netstorm.geoserver.config.settings import MAX_EARLY_MESSAGES, MAX_ROUNDS_AHEAD, \
    RuntimeSettings
from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
from netstorm.geoserver.core.ratelog import RateLimitedLog
from netstorm.geoserver.core.wire import Kind, Message
from netstorm.geoserver.policy.tree import PolicyBook
from netstorm.geoserver.server.local_store import RequestError
from netstorm.geoserver.server.round_gate import RoundGate
from netstorm.geoserver.server.worker_requests import WorkerRequests
from netstorm.scheduler.policy import star_policy

WORKER = 3
TABLE = NodeTable([NodeInfo(0, "scheduler", "", "tcp://s"), NodeInfo(1, "server", "eu", "tcp://e"),
                   NodeInfo(2, "server", "us", "tcp://u"),
                   NodeInfo(WORKER, "worker", "eu", "tcp://w", 0, 0)])


class Store:
    max_round = 0

    def __init__(self):
        self.handled = []

    def __getattr__(self, name):            # on_init, on_push, ...: record, or refuse
        def handle(msg):
            if msg.key == 99:
                raise RequestError("key 99 is cursed")
            self.handled.append((name, msg.request))
        return handle


class Recovery:
    active = False

    def take(self, msg):
        return True

    def release(self):
        return []


class Po:
    table = TABLE

    def __init__(self):
        self.sent = []

    def send(self, node, msg):
        self.sent.append((node, msg))


def desk(policy=True, gate=False):
    po, store, beats = Po(), Store(), []
    policies = PolicyBook(star_policy(["eu", "us"], "eu") if policy else None)
    requests = WorkerRequests("eu", po, store, policies, RoundGate(gate, 10.0), Recovery(),
                              RuntimeSettings(), None, lambda: beats.append(1),
                              RateLimitedLog(logging.getLogger("test")))
    return requests, po, store, policies, beats


def test_requests_before_the_first_policy_wait_and_go_on_in_order():
    requests, po, store, policies, _ = desk(policy=False)
    requests.accept(init_message(WORKER, 0, np.zeros(4, np.float32)))
    requests.accept(Message(Kind.PULL, sender=WORKER, key=0, request=2))
    assert store.handled == []
    policies.add(star_policy(["eu", "us"], "eu"))
    requests.policy_known()
    assert [name for name, _ in store.handled] == ["on_init", "on_pull"]


def test_past_the_limit_a_request_waiting_for_the_policy_is_refused():
    requests, po, store, _, _ = desk(policy=False)
    for request in range(MAX_EARLY_MESSAGES + 1):
        requests.accept(Message(Kind.PULL, sender=WORKER, key=0, request=request))
    (node, error), = po.sent
    assert node == WORKER and error.kind == Kind.ERROR and error.request == MAX_EARLY_MESSAGES
    assert "requests already wait for the first policy" in error.meta["reason"]


def test_a_request_the_store_refuses_is_answered_with_its_reason():
    requests, po, _, _, _ = desk()
    requests.accept(Message(Kind.PULL, sender=WORKER, key=99, request=5))
    (_, error), = po.sent
    assert (error.kind, error.request, error.meta["reason"]) == \
        (Kind.ERROR, 5, "key 99 is cursed")


def test_a_gated_push_waits_for_its_round_asking_for_it_and_one_too_far_ahead_is_refused():
    requests, po, store, _, beats = desk(gate=True)
    requests.accept(push_message(WORKER, 0, 1, np.ones(4, np.float32), request=1))
    assert store.handled == [] and beats == [1]
    requests.open(1)
    assert store.handled == [("on_push", 1)]
    requests.accept(push_message(WORKER, 0, MAX_ROUNDS_AHEAD + 9, np.ones(4, np.float32),
                                 request=2))
    (_, error), = po.sent
    assert "rounds ahead of this DC's round" in error.meta["reason"]
