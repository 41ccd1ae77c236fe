"""netstorm.geoserver.server.geoserver: GeoServer's wiring and dispatch without sockets (a stand-in
Postoffice): the round gate holds pushes until the scheduler opens their round, chunks from the
WAN reach the tree exchange, a bad request from the scheduler stops the server naming the
field; and a running server survives garbage frames and strangers, and keeps exact sums."""

import numpy as np
import pytest
from fakes import FakePostoffice, init_message, push_message
from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
from netstorm.geoserver.core.postoffice import AbortError
from netstorm.geoserver.server.geoserver import GeoServer
from netstorm.geoserver.config.settings import RuntimeSettings
from netstorm.geoserver.core.wire import Kind, Message
from netstorm.scheduler.policy import star_policy

pytestmark = pytest.mark.usefixtures("dataplane")   # both data paths (conftest.py)

EU_SERVER, US_SERVER, EU_WORKER = 1, 2, 3


def eu_server(round_gate: bool, replacing: bool = False) -> GeoServer:
    table = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:1"),
                       NodeInfo(EU_SERVER, "server", "eu", "tcp://127.0.0.1:2"),
                       NodeInfo(US_SERVER, "server", "us", "tcp://127.0.0.1:3"),
                       NodeInfo(EU_WORKER, "worker", "eu", "tcp://127.0.0.1:4", 0, 0),
                       NodeInfo(4, "worker", "us", "tcp://127.0.0.1:5", 1, 0)])
    settings = RuntimeSettings(round_gate=round_gate, timeout_s=10.0)
    return GeoServer(FakePostoffice(table, EU_SERVER, settings,
                                    None if replacing else star_policy(["eu", "us"], "eu"),
                                    rejoined=replacing))


def replies(server, kind):
    return [m for _, m in server.po.sent if m.kind == kind]


def test_a_gated_push_waits_for_its_round_and_the_sum_comes_back_through_the_exchange():
    server = eu_server(round_gate=True)
    assert server.handle(init_message(EU_WORKER, 0, np.zeros(4, np.float32)))
    assert len(replies(server, Kind.INIT_DONE)) == 1
    assert server.po.van.sent == [(US_SERVER, 0)]          # the value passed on to us
    server.handle(push_message(EU_WORKER, 0, 1, np.ones(4, np.float32), request=7))
    assert server.exchange.in_flight == 0                  # held: round 1 is not open
    asked = [m.meta["round"] for m in server.po.to_scheduler if m.kind == Kind.HEARTBEAT]
    assert asked == [1]                                    # asked at once, once
    server.handle(Message(Kind.ROUND_OPEN, sender=0, seq=1))
    assert server.exchange.in_flight == 1                  # eu's sum waits for us's
    up = np.full(4, 2, np.float32)
    server.handle(Message(Kind.CHUNK_UP, sender=US_SERVER, key=0, chunk=0, seq=1, policy=1,
                          tree=0, dtype=np.float32, frames=[up]))
    assert server.po.van.sent[-1] == (US_SERVER, 0)        # the total goes down to us
    (value,) = replies(server, Kind.VALUE)
    assert value.request == 7 and np.array_equal(value.arrays()[0], np.full(4, 3))


def test_without_the_gate_a_push_goes_straight_to_the_wan():
    server = eu_server(round_gate=False)
    server.handle(init_message(EU_WORKER, 0, np.zeros(4, np.float32)))
    server.handle(push_message(EU_WORKER, 0, 1, np.ones(4, np.float32)))
    assert server.exchange.in_flight == 1 and server.po.to_scheduler == []


def test_a_bad_probe_request_stops_the_server_naming_the_field():
    server = eu_server(round_gate=False)
    with pytest.raises(AbortError, match="eu: bad PROBE_REQUEST from the scheduler: "
                                         "ProbeRequest: missing field 'timeout_s'"):
        server.handle(Message(Kind.PROBE_REQUEST, sender=0, meta={"probe_bytes": 1024}))


def test_a_gated_push_too_far_ahead_is_refused_not_held_and_not_asked_for():
    from netstorm.geoserver.config.settings import MAX_ROUNDS_AHEAD
    server = eu_server(round_gate=True)
    server.handle(init_message(EU_WORKER, 0, np.zeros(4, np.float32)))
    server.handle(push_message(EU_WORKER, 0, MAX_ROUNDS_AHEAD + 1, np.ones(4, np.float32),
                               request=9))
    (error,) = replies(server, Kind.ERROR)
    assert error.request == 9 and f"more than {MAX_ROUNDS_AHEAD} rounds ahead" in \
        error.meta["reason"]
    assert server.gate.held == 0 and server.gate.requested == 0
    server.handle(push_message(EU_WORKER, 0, 1, np.ones(4, np.float32)))
    assert server.gate.held == 1 and server.gate.requested == 1


def test_a_replacement_server_takes_a_peer_replica_before_any_worker_request():
    """docs/recovery.md: the new server of a DC drops what a worker sent before asking where
    to resume (it was meant for the lost process), keeps the rest until it holds every key
    at its planned round, copied from the peer the plan names and checked against the
    digest; then it answers and replays under the replay policy."""
    from netstorm.geoserver.server.replica import KeyReplica, digest, encode
    server = eu_server(round_gate=False, replacing=True)
    value = np.arange(4, dtype=np.float32)
    server.handle(push_message(EU_WORKER, 0, 4, np.ones(4, np.float32), request=5))
    server.handle(Message(Kind.RESUME, sender=EU_WORKER, request=9))
    assert server.po.sent == [] and server.recovery.held
    replay = star_policy(["eu", "us"], "eu", version=2, start_round=4).to_json()
    server.handle(Message(Kind.REPLAY, sender=0, meta={
        "policy": replay, "keys": [[0, 3, ["us"], digest(value)]], "opened": 3}))
    assert server.recovery.awaiting == {0: (3, digest(value), "us")}
    assert server.po.van.sent == [(US_SERVER, 0)]           # the STATE_REQUEST
    meta, frames = encode([KeyReplica(0, 3, (4,), np.dtype(np.float32), False, value)],
                          None, None)
    server.handle(Message(Kind.STATE, sender=US_SERVER, meta=meta, dtype=np.uint8,
                          frames=frames))
    (resumed,) = replies(server, Kind.RESUMED)
    assert resumed.request == 9 and resumed.meta["pushed"] == [[0, 3]]
    assert [m.kind for m in server.po.to_scheduler if m.kind != Kind.HEARTBEAT] == \
        [Kind.RECOVERED]
    server.handle(push_message(EU_WORKER, 0, 4, np.ones(4, np.float32), request=6))
    assert server.exchange.in_flight == 1                  # round 4 waits for us's part
    up = np.full(4, 2, np.float32)
    server.handle(Message(Kind.CHUNK_UP, sender=US_SERVER, key=0, chunk=0, seq=4, policy=2,
                          tree=0, dtype=np.float32, frames=[up]))
    (total,) = replies(server, Kind.VALUE)
    assert total.request == 6 and total.seq == 4 and np.array_equal(total.arrays()[0], [3] * 4)


class _Inbox(FakePostoffice):
    """A FakePostoffice whose socket already holds ``messages``: the serve loop takes them
    in order (``van.pending`` says whether more wait)."""

    def __init__(self, *args, messages=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.inbox = list(messages)
        self.van.pending = lambda: bool(self.inbox)
        self.waits = 0

    def wait(self, timeout_s, writable=()):
        self.waits += 1
        return bool(self.inbox), []

    def recv(self, timeout_s):
        return self.inbox.pop(0) if self.inbox else None


def test_serve_handles_every_message_of_a_burst_longer_than_one_drain():
    from netstorm.geoserver.server.geoserver import DRAIN_MESSAGES
    keys = 3 * DRAIN_MESSAGES + 1
    burst = [init_message(EU_WORKER, k, np.zeros(4, np.float32)) for k in range(keys)] + \
        [push_message(EU_WORKER, k, 1, np.ones(4, np.float32)) for k in range(keys)] + \
        [Message(Kind.SHUTDOWN, sender=0)]
    table = eu_server(round_gate=False).table
    po = _Inbox(table, EU_SERVER, RuntimeSettings(timeout_s=10.0),
                star_policy(["eu", "us"], "eu"), messages=burst)
    server = GeoServer(po)
    server.serve()
    assert server.stats["messages"] == len(burst) and not po.inbox
    assert len(replies(server, Kind.INIT_DONE)) == keys
    assert server.exchange.in_flight == keys        # every push reached the WAN side
    assert po.waits <= len(burst) // DRAIN_MESSAGES + 3     # a poll per drain, not per message


@pytest.mark.parametrize("fuse_bytes", [1 << 16, 0])
def test_the_small_values_one_drain_makes_go_to_each_worker_in_one_batch(fuse_bytes):
    from netstorm.geoserver.core import batch
    from netstorm.geoserver.server.geoserver import DRAIN_MESSAGES
    table = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:1"),
                       NodeInfo(EU_SERVER, "server", "eu", "tcp://127.0.0.1:2"),
                       NodeInfo(EU_WORKER, "worker", "eu", "tcp://127.0.0.1:4", 0, 0),
                       NodeInfo(5, "worker", "eu", "tcp://127.0.0.1:5", 1, 1)])
    keys = DRAIN_MESSAGES // 2
    burst = [init_message(w, k, np.zeros(4, np.float32) if w == EU_WORKER else None, [4])
             for k in range(keys) for w in (EU_WORKER, 5)] + \
        [push_message(w, k, 1, np.full(4, w, np.float32), request=100 * w + k)
         for k in range(keys) for w in (EU_WORKER, 5)] + [Message(Kind.SHUTDOWN, sender=0)]
    po = _Inbox(table, EU_SERVER, RuntimeSettings(timeout_s=10.0, fuse_bytes=fuse_bytes),
                star_policy(["eu"], "eu"), messages=burst)
    server = GeoServer(po)
    server.serve()
    for worker in (EU_WORKER, 5):
        sent = [m for to, m in po.sent if to == worker and m.kind in (Kind.VALUE, Kind.BATCH)]
        values = [v for m in sent for v in
                  (batch.unpack(m) if m.kind == Kind.BATCH else [m])]
        assert sorted((v.key, v.request) for v in values) == \
            [(k, 100 * worker + k) for k in range(keys)]
        assert all(np.array_equal(v.arrays()[0], np.full(4, EU_WORKER + 5)) for v in values)
        assert len(sent) < keys if fuse_bytes else len(sent) == keys
    assert server.stats["fused"] == (2 * keys if fuse_bytes else 0)


def test_a_forged_pull_answered_in_the_same_drain_does_not_lose_the_workers_value():
    """The fuzz test's lost pull (seed 11): a PULL claiming the worker, with request id
    2**64 - 1, and the worker's own pushpull in one drain; both VALUEs go in one BATCH,
    which the worker's Van (decode, schema, unpack) must take whole."""
    from netstorm.geoserver.core import batch, kinds, wire
    forged = Message(Kind.PULL, sender=EU_WORKER, key=0, seq=0, request=(1 << 64) - 1)
    burst = [init_message(EU_WORKER, 0, np.zeros(4, np.float32)), forged,
             push_message(EU_WORKER, 0, 1, np.ones(4, np.float32), request=7),
             Message(Kind.SHUTDOWN, sender=0)]
    table = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:1"),
                       NodeInfo(EU_SERVER, "server", "eu", "tcp://127.0.0.1:2"),
                       NodeInfo(EU_WORKER, "worker", "eu", "tcp://127.0.0.1:4", 0, 0)])
    po = _Inbox(table, EU_SERVER, RuntimeSettings(timeout_s=10.0), star_policy(["eu"], "eu"),
                messages=burst)
    GeoServer(po).serve()
    received = []
    for _, msg in po.sent:      # as the worker's Van takes them
        msg = kinds.validate(wire.decode([bytes(f) for f in wire.encode(msg)]))
        received += batch.unpack(msg) if msg.kind == Kind.BATCH else [msg]
    assert [(m.kind, m.request) for m in received if m.kind == Kind.VALUE] == \
        [(Kind.VALUE, (1 << 64) - 1), (Kind.VALUE, 7)]


class _Socket(_Inbox):
    """An :class:`_Inbox` the test fills from its own thread while ``serve`` runs on
    another: ``wait`` blocks until a message comes or its timeout passes; :meth:`until`
    waits for what the server sent."""

    def __init__(self, *args, **kwargs):
        import threading
        super().__init__(*args, **kwargs)
        self.cond = threading.Condition()

    def put(self, msg):
        with self.cond:
            self.inbox.append(msg)
            self.cond.notify_all()

    def wait(self, timeout_s, writable=()):
        with self.cond:
            self.cond.wait_for(lambda: self.inbox, timeout_s)
            return bool(self.inbox), []

    def recv(self, timeout_s):
        with self.cond:
            return super().recv(timeout_s)

    def send(self, node_id, msg):
        with self.cond:
            super().send(node_id, msg)
            self.cond.notify_all()

    def send_scheduler(self, msg):
        with self.cond:
            super().send_scheduler(msg)
            self.cond.notify_all()

    def until(self, predicate, timeout_s=5.0) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout_s)


def test_a_slow_optimizer_build_holds_the_workers_requests_but_not_the_heartbeats(monkeypatch):
    """Building the optimizer imports MXNet (a second or more, longer under load): it runs
    off the server's loop, which goes on beating; the local workers' requests after
    SET_OPTIMIZER wait for the optimizer, then are handled in order."""
    import threading

    from netstorm.geoserver.server import local_store
    started, release, where = threading.Event(), threading.Event(), []

    class SlowHost:                     # stands in for OptimizerHost (MXNet's import)
        name = "slow"

        def __init__(self, spec):
            where.append(threading.current_thread())
            started.set()
            release.wait(30)
    monkeypatch.setattr(local_store, "OptimizerHost", SlowHost)
    table = eu_server(round_gate=False).table
    po = _Socket(table, EU_SERVER, RuntimeSettings(timeout_s=10.0, heartbeat_s=0.02,
                                                   dead_after_s=60.0),
                 star_policy(["eu", "us"], "eu"))
    server, failed = GeoServer(po), []

    def serve():
        try:
            server.serve()
        except Exception as exc:        # noqa: BLE001 - the test asserts there is none
            failed.append(exc)
    loop = threading.Thread(target=serve, daemon=True)
    loop.start()
    try:
        po.put(init_message(EU_WORKER, 0, np.zeros(4, np.float32)))
        po.put(Message(Kind.SET_OPTIMIZER, sender=EU_WORKER, request=4,
                       meta={"spec": {"name": "sgd", "attrs": {}}}))
        po.put(push_message(EU_WORKER, 0, 1, np.ones(4, np.float32), request=5))
        assert started.wait(5)
        beats = len(po.to_scheduler)
        assert po.until(lambda: len(po.to_scheduler) >= beats + 3), \
            "no heartbeat while the optimizer was being built"
        assert replies(server, Kind.OPTIMIZER_DONE) == [] and server.exchange.in_flight == 0
    finally:
        release.set()
    assert po.until(lambda: replies(server, Kind.OPTIMIZER_DONE))
    po.put(Message(Kind.SHUTDOWN, sender=0))
    loop.join(10)
    assert not loop.is_alive() and not failed, failed
    assert where != [loop] and isinstance(server.store.optimizer, SlowHost)
    (done,) = replies(server, Kind.OPTIMIZER_DONE)
    assert done.request == 4 and server.exchange.in_flight == 1     # then the held push


def test_heartbeats_queued_during_a_long_handler_are_read_before_judging_the_scheduler(
        monkeypatch):
    """A handler that kept the loop busy beyond dead_after_s does not make the scheduler
    look silent: the beats that queued up meanwhile are read before the judgment."""
    import types

    from fakes import Clock
    from netstorm.geoserver.server import geoserver as server_module
    clock = Clock(100.0)
    monkeypatch.setattr(server_module, "time", types.SimpleNamespace(monotonic=clock))
    table = eu_server(round_gate=False).table
    burst = [init_message(EU_WORKER, 0, np.zeros(4, np.float32)),
             Message(Kind.HEARTBEAT, sender=0), Message(Kind.SHUTDOWN, sender=0)]
    po = _Inbox(table, EU_SERVER, RuntimeSettings(timeout_s=10.0, dead_after_s=2.0),
                star_policy(["eu", "us"], "eu"), messages=burst)
    server = GeoServer(po)
    on_init = server.requests._store_handlers[Kind.INIT]

    def long_init(msg):
        on_init(msg)
        clock.t += 10.0                 # busy for 5 x dead_after_s
    server.requests._store_handlers[Kind.INIT] = long_init
    server.serve()                      # no AbortError naming the scheduler
    assert server.stats["messages"] == len(burst) and not po.inbox


def test_a_server_reports_itself_to_a_new_scheduler_and_takes_its_welcome():
    """scheduler_restarts: a server that lost its scheduler reports its policies, rounds,
    round gate and workers; a new scheduler's WELCOME with its table ends the wait (and
    the round gate asks it at once), one with another table is dropped."""
    import time
    table = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:1"),
                       NodeInfo(EU_SERVER, "server", "eu", "tcp://127.0.0.1:2"),
                       NodeInfo(US_SERVER, "server", "us", "tcp://127.0.0.1:3"),
                       NodeInfo(EU_WORKER, "worker", "eu", "tcp://127.0.0.1:4", 0, 0)])
    settings = RuntimeSettings(round_gate=True, timeout_s=10.0, dead_after_s=1.0,
                               scheduler_restarts=1)
    policy = star_policy(["eu", "us"], "eu")
    server = GeoServer(FakePostoffice(table, EU_SERVER, settings, policy))
    report = server._rebuild_report()
    assert report["node"] == table[EU_SERVER].to_json()
    assert report["policies"] == [policy.to_json()]
    assert (report["round"], report["opened"], report["requested"]) == (0, 0, 0)
    assert report["workers"] == [table[EU_WORKER].to_json()] and report["keys"] == []
    assert server.scheduler_watch.check(time.monotonic() + 2.0, "presumed dead") == ""
    assert server.scheduler_watch.lost
    other = NodeTable(list(table.nodes.values())[:3])
    server.handle(Message(Kind.WELCOME, sender=0, meta={
        "nodes": other.to_json(), "you": EU_SERVER, "settings": {}, "rebuilt": True}))
    assert server.scheduler_watch.lost and server.po.to_scheduler == []
    server.handle(Message(Kind.WELCOME, sender=0, meta={
        "nodes": table.to_json(), "you": EU_SERVER, "settings": {}, "rebuilt": True}))
    assert not server.scheduler_watch.lost
    assert [m.kind for m in server.po.to_scheduler] == [Kind.HEARTBEAT]
def test_quorum_rounds_offer_a_ready_round_and_send_it_once_the_scheduler_decides():
    """diloco with a quorum of 1 of 2 DCs: eu's round 1 is offered to the scheduler
    (QUORUM_READY through 1) and leaves for the WAN only with the decision; a decision
    naming a DC not in the cluster, or weighing rounds eu did not offer, is dropped."""
    from netstorm.geoserver.config.sync import SyncConfig
    table = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:1"),
                       NodeInfo(EU_SERVER, "server", "eu", "tcp://127.0.0.1:2"),
                       NodeInfo(US_SERVER, "server", "us", "tcp://127.0.0.1:3"),
                       NodeInfo(EU_WORKER, "worker", "eu", "tcp://127.0.0.1:4", 0, 0),
                       NodeInfo(4, "worker", "us", "tcp://127.0.0.1:5", 1, 0)])
    settings = RuntimeSettings(timeout_s=10.0, sync=SyncConfig(mode="diloco", h=2, quorum=1))
    server = GeoServer(FakePostoffice(table, EU_SERVER, settings,
                                      star_policy(["eu", "us"], "eu")))
    server.handle(init_message(EU_WORKER, 0, np.zeros(4, np.float32)))
    server.handle(push_message(EU_WORKER, 0, 1, np.ones(4, np.float32)))
    (offer,) = [m for m in server.po.to_scheduler if m.kind == Kind.QUORUM_READY]
    assert (offer.seq, offer.meta) == (1, {"through": 1})
    assert server.exchange.in_flight == 0                  # waits for the decision
    for weights in ({"eu": 1, "mars": 1}, {"eu": 2}):
        server.handle(Message(Kind.QUORUM, sender=0, seq=1, meta={"weights": weights}))
        assert server.exchange.in_flight == 0
    server.handle(Message(Kind.QUORUM, sender=0, seq=1, meta={"weights": {"eu": 1}}))
    assert server.exchange.in_flight == 1                  # eu's round 1 is on the WAN
