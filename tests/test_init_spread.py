"""netstorm.geoserver.server.init_spread: a local worker's initial value goes out once along
the first tree (or the widest paths when the links are known); another DC's INIT is declared
here and passed on, waits for the first policy when it comes earlier, and a bad one is
logged and goes no further."""
import logging
from types import SimpleNamespace

import numpy as np

from fakes import init_message
from netstorm.geoserver.core.ratelog import RateLimitedLog
from netstorm.geoserver.core.wire import Flag, Kind
from netstorm.geoserver.policy.tree import PolicyBook
from netstorm.geoserver.server.init_spread import InitSpread
from netstorm.geoserver.server.local_store import RequestError
from netstorm.scheduler.policy import star_policy

DCS = ["eu", "us", "asia"]


class Wan:
    def __init__(self):
        self.sent = []

    def send(self, dc, msg):
        self.sent.append((dc, msg))


class Store:
    def __init__(self):
        self.declared = []

    def on_init(self, msg):
        if msg.key == 99:
            raise RequestError("shape mismatch")
        self.declared.append(msg.key)


def spread(dc, policy=True):
    wan, store = Wan(), Store()
    policies = PolicyBook(star_policy(DCS, "eu") if policy else None)
    return InitSpread(dc, store, policies, wan, {}, RateLimitedLog(logging.getLogger("t"))), \
        wan, store, policies


def peer_init(key, origin):
    msg = init_message(2, key, np.zeros(4, np.float32))
    msg.meta["origin"] = origin
    return msg


def test_a_local_value_goes_to_the_roots_children_once_each():
    inits, wan, _, _ = spread("eu")
    entry = SimpleNamespace(key=5, shape=(4,), dtype=np.dtype(np.float32), sparse=False,
                            value=np.ones(4, np.float32))
    inits.forward(entry, 1)
    assert sorted(dc for dc, _ in wan.sent) == ["asia", "us"]
    msg = wan.sent[0][1]
    assert (msg.kind, msg.key, msg.seq, msg.meta["origin"]) == (Kind.INIT, 5, 1, "eu")
    assert msg.flags & Flag.HAS_VALUE and wan.sent[0][1] is not wan.sent[1][1]


def test_a_leaf_declares_another_dcs_init_and_passes_it_nowhere():
    inits, wan, store, _ = spread("us")
    inits.on_peer_init("eu", peer_init(3, "eu"))
    assert store.declared == [3] and wan.sent == []


def test_an_init_before_the_first_policy_waits_for_it():
    inits, wan, store, policies = spread("us", policy=False)
    inits.on_peer_init("eu", peer_init(3, "eu"))
    assert store.declared == []
    policies.add(star_policy(DCS, "eu"))
    (early,) = inits.take_early()
    assert early.key == 3 and inits.take_early() == []


def test_a_bad_init_is_logged_and_not_passed_on(caplog):
    inits, wan, store, _ = spread("eu")
    with caplog.at_level(logging.ERROR):
        inits.on_peer_init("us", peer_init(99, "us"))
    assert "bad INIT of key 99 from us: shape mismatch" in caplog.text and wan.sent == []
