"""netstorm.geoserver.server.geoserver: GeoServer's wiring and dispatch without sockets (a stand-in
Postoffice): the round gate holds pushes until the scheduler opens their round, chunks from the
WAN reach the tree exchange, a bad request from the scheduler stops the server naming the
field; and a running server survives garbage frames and strangers, and keeps exact sums."""
import numpy as np
import pytest

from conftest import launch, worker_cmd
from fakes import FakePostoffice, init_message, push_message
from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
from netstorm.geoserver.core.postoffice import AbortError
from netstorm.geoserver.server.geoserver import GeoServer
from netstorm.geoserver.config.settings import RuntimeSettings
from netstorm.geoserver.core.wire import Kind, Message
from netstorm.scheduler.policy import star_policy

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


@pytest.mark.slow
def test_server_survives_garbage_and_unknown_peers(no_leftovers):
    run = launch(["--dcs", 2, "--workers-per-dc", 1],
                 worker_cmd("fault_worker.py", "garbage", 5), no_leftovers)
    assert run.code == 0, run.output[-4000:]
    for reason in ("expected at least 2 frames", "bad magic", "header is", "not JSON",
                   "unknown message kind", "PUSH claims to come from node 4242, which is not in the cluster",
                   "not a multiple of float32"):
        assert sum(reason in l for l in run.lines("server")) == 2, reason
    assert run.output.count("finished 5 rounds") == 2     # sums stayed exact


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
    assert server.recovery.awaiting == {0: (3, digest(value))}
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
