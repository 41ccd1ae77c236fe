"""Postoffice.register against a scheduler played by the test (loopback sockets): messages
that beat the WELCOME are kept (if the table then admits them), and the WELCOME's settings
are validated on arrival."""

import threading
import time
import numpy as np
import pytest
from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
from netstorm.geoserver.core.postoffice import Postoffice
from netstorm.geoserver.config.settings import RuntimeSettings
from netstorm.geoserver.core.van import Van


@pytest.fixture
def node():
    """``(postoffice, scheduler van, peer van)``: a server of dc0 not yet registered; the
    peer is dc1's server (node 2 of the table :func:`register` sends)."""
    sched, node_van, peer = (Van(name, "127.0.0.1", 0) for name in ("sched", "node", "peer"))
    peer.connect("n", node_van.address)
    peer.node_id = 2
    yield Postoffice(node_van, sched.address, "server", "dc0"), sched, peer
    for van in (peer, sched, node_van):
        van.close()


def register(po: Postoffice, sched: Van, **welcome):
    """``po.register`` while the test's scheduler answers with a WELCOME: the node table
    (the scheduler and this server), then ``welcome`` over it."""
    table = [{"id": 0, "role": "scheduler", "dc": "", "address": sched.address,
              "rank": -1, "local_rank": -1},
             {"id": 1, "role": "server", "dc": "dc0", "address": po.van.address,
              "rank": -1, "local_rank": -1},
             {"id": 2, "role": "server", "dc": "dc1", "address": "tcp://127.0.0.1:1",
              "rank": -1, "local_rank": -1}]

    def answer():
        reg = sched.recv(10)
        assert reg.kind == wire.Kind.REGISTER
        time.sleep(0.3)
        sched.connect("n", po.van.address)
        sched.send("n", wire.Message(wire.Kind.WELCOME, meta={
            "nodes": table, "you": 1, "settings": RuntimeSettings().to_json(), **welcome}))
    scheduler = threading.Thread(target=answer)
    scheduler.start()
    try:
        return po.register(10)
    finally:
        scheduler.join()


class _StubVan:
    address = "tcp://127.0.0.1:1"
    local_address = ""

    def connect(self, peer, address, send_hwm=0, principal="", watch=False):
        pass


def test_messages_before_the_welcome_are_bounded_in_number_and_bytes(monkeypatch, caplog):
    from netstorm.geoserver.core import postoffice
    monkeypatch.setattr(postoffice, "MAX_EARLY_MESSAGES", 3)
    monkeypatch.setattr(postoffice, "MAX_HELD_BYTES_PER_PEER", 100)
    po = Postoffice(_StubVan(), "tcp://127.0.0.1:2", "server", "dc0")
    chunk = wire.Message(wire.Kind.CHUNK_UP, sender=2, dtype=np.uint8,
                         frames=[np.zeros(60, np.uint8)])
    po._keep_early(chunk)
    po._keep_early(chunk)                                  # 120 bytes: over the bound
    for _ in range(3):
        po._keep_early(wire.Message(wire.Kind.HEARTBEAT, sender=2))
    assert [m.kind for m in po.early] == [wire.Kind.CHUNK_UP, wire.Kind.HEARTBEAT,
                                          wire.Kind.HEARTBEAT]
    assert "dropped CHUNK_UP from node 2 that came before the WELCOME" in caplog.text
    po.early = [m for m in po.early if m.kind == wire.Kind.CHUNK_UP]
    po.table = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:2"),
                          NodeInfo(1, "server", "dc0", "tcp://127.0.0.1:1"),
                          NodeInfo(2, "server", "dc1", "tcp://127.0.0.1:3")])
    po.me = po.table[1]
    assert len(po.take_early()) == 1 and po._early_bytes == 0


def test_only_nodes_of_this_dc_on_this_host_are_reached_over_ipc():
    import socket
    po = Postoffice(_StubVan(), "tcp://127.0.0.1:2", "worker", "dc0")
    po.van.local_address = "ipc:///tmp/netstorm-me/node.sock"
    here = socket.gethostname()

    def node(dc, host, local="ipc:///tmp/netstorm-x/node.sock"):
        return NodeInfo(1, "server", dc, "tcp://127.0.0.1:9", host=host, local_address=local)
    assert po.address_of(node("dc0", here)) == "ipc:///tmp/netstorm-x/node.sock"
    assert po.address_of(node("dc1", here)) == "tcp://127.0.0.1:9"    # another DC: the WAN
    assert po.address_of(node("dc0", here + "-other")) == "tcp://127.0.0.1:9"
    assert po.address_of(node("dc0", here, local="")) == "tcp://127.0.0.1:9"
    po.van.local_address = ""                                        # this node has none
    assert po.address_of(node("dc0", here)) == "tcp://127.0.0.1:9"


def _judging(monkeypatch, **settings):
    """A worker of dc0 past its WELCOME, on a clock the test moves; its Van's queue is
    ``po.van.queued`` (messages waiting to be read)."""
    import types

    from fakes import Clock
    from netstorm.geoserver.core import postoffice
    clock = Clock(500.0)
    monkeypatch.setattr(postoffice, "time", types.SimpleNamespace(monotonic=clock))
    van = _StubVan()
    van.queued = False
    van.pending = lambda: van.queued
    po = Postoffice(van, "tcp://127.0.0.1:2", "worker", "dc0")
    po.table = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:2"),
                          NodeInfo(1, "server", "dc0", "tcp://127.0.0.1:1"),
                          NodeInfo(3, "worker", "dc0", "tcp://127.0.0.1:3", 0, 0)])
    po.me, po.settings = po.table[3], RuntimeSettings(heartbeat_s=0.5, dead_after_s=10.0,
                                                      **settings)
    po.judge_scheduler()
    return po, clock


def _scheduler_beats(po, clock, seconds, rtt=0.0):
    for _ in range(int(seconds / 0.5)):
        clock.t += 0.5
        assert po.admit(wire.Message(wire.Kind.HEARTBEAT, sender=0,
                                     meta={"t": clock.t - 0.01, "rtt": rtt}))


def test_a_silent_scheduler_is_presumed_dead_after_its_learnt_deadline_not_dead_after_s(
        monkeypatch):
    """With a restart to wait for (the verdict is undone: the node re-registers), its
    deadline is three floors (its one loop also plans); beats queued while this node was
    busy are read first; each beat's clock goes back on this node's next beat."""
    po, clock = _judging(monkeypatch, scheduler_restarts=1)     # detect_floor_s = 1: 3 s
    _scheduler_beats(po, clock, 10.0)
    clock.t += 3.0
    assert po.scheduler_verdict(clock.t) == ""
    clock.t += 0.1
    po.van.queued = True                                # a beat waits to be read
    assert po.scheduler_verdict(clock.t) == ""
    po.van.queued = False
    assert po.scheduler_verdict(clock.t).startswith(
        "the scheduler at tcp://127.0.0.1:2 sent nothing for 3.1s (its deadline 3.00s")
    beat = wire.Message(wire.Kind.HEARTBEAT, meta={})
    sent = []
    po.van.send = lambda peer, msg: sent.append(msg)
    po.send_scheduler(beat)
    assert sent[0].meta["echo"] == [pytest.approx(clock.t - 3.1 - 0.01),
                                    pytest.approx(3.1)]


def test_without_scheduler_restarts_a_silent_scheduler_has_dead_after_s(monkeypatch):
    """The verdict would stop this node for good: silence alone (a loaded machine, a long
    pause) is given the configured bound, not the learnt deadline."""
    po, clock = _judging(monkeypatch)
    _scheduler_beats(po, clock, 10.0)
    clock.t += 9.9
    assert po.scheduler_verdict(clock.t) == ""
    clock.t += 0.2
    assert po.scheduler_verdict(clock.t).startswith(
        "the scheduler at tcp://127.0.0.1:2 sent nothing for 10.1s (dead_after_s=10)")


def test_the_scheduler_s_closed_connection_is_a_verdict_after_a_few_round_trips(monkeypatch):
    import zmq
    po, clock = _judging(monkeypatch)
    po.connections._clock = clock
    _scheduler_beats(po, clock, 5.0, rtt=0.2)           # a long link: 0.4 s of grace
    handle = po.connections.handler("scheduler")[1]
    handle(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, b"")
    handle(zmq.EVENT_DISCONNECTED, 0, b"")
    clock.t += 0.3
    assert po.scheduler_verdict(clock.t) == ""
    clock.t += 0.1
    assert "closed its connection 0.40s ago and did not reconnect" in \
        po.scheduler_verdict(clock.t)
    off, clock = _judging(monkeypatch, detect_floor_s=0.0)     # the old rule
    off.connections._clock = clock
    handle = off.connections.handler("scheduler")[1]
    handle(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, b"")
    handle(zmq.EVENT_DISCONNECTED, 0, b"")
    clock.t += 9.0
    assert off.scheduler_verdict(clock.t) == ""
    clock.t += 1.5
    assert "sent nothing for 10.5s (dead_after_s=10)" in off.scheduler_verdict(clock.t)


class _ScriptedVan(_StubVan):
    """A Van whose :meth:`recv` plays ``answers`` in turn (None: woken or timed out, the
    test's clock moving by the wait asked for); it records each wait."""

    def __init__(self, clock, answers):
        self.clock, self.answers, self.waits, self.refusals = clock, list(answers), [], {}

    def send(self, peer, msg):
        pass

    def recv(self, timeout_s):
        self.waits.append(timeout_s)
        answer = self.answers.pop(0)
        if callable(answer):
            answer = answer()
        if answer is None:
            self.clock.t += timeout_s if not self.answers else 0.0   # the last: times out
        return answer


def _registering(monkeypatch, answers):
    import types

    from fakes import Clock
    from netstorm.geoserver.core import postoffice
    clock = Clock(100.0)
    monkeypatch.setattr(postoffice, "time", types.SimpleNamespace(monotonic=clock))
    van = _ScriptedVan(clock, answers)
    po = Postoffice(van, "tcp://127.0.0.1:2", "worker", "dc0")
    po.connections._clock = clock
    return po, van, clock


def test_an_abort_during_registration_is_another_node_s_failure_an_error_this_node_s(
        monkeypatch):
    from netstorm.geoserver.core.postoffice import RendezvousError
    abort = wire.Message(wire.Kind.ABORT, sender=0, meta={"reason": "server of dc1 failed"})
    po, _, _ = _registering(monkeypatch, [abort])
    with pytest.raises(RendezvousError, match="worker in dc0: the scheduler stopped the "
                       "cluster before this node's registration was answered: server of "
                       "dc1 failed") as stopped:
        po.register(30)
    assert stopped.value.caused_by_other
    error = wire.Message(wire.Kind.ERROR, sender=0, meta={"reason": "unknown DC 'dc9'"})
    po, _, _ = _registering(monkeypatch, [error])
    with pytest.raises(RendezvousError, match="scheduler refused registration: unknown DC"
                       ) as refused:
        po.register(30)
    assert not refused.value.caused_by_other


def test_a_scheduler_that_closes_its_connection_during_registration_ends_the_wait_at_once(
        monkeypatch):
    """The scheduler stopped (its connection closed) while this node waited for its
    WELCOME: the wait ends after the closed connection's grace, as another node's failure,
    not after 2 x timeout_s with a message blaming the wait (seen: a server's failure at
    start-up was named after a worker's "waited 60s")."""
    import zmq
    from netstorm.geoserver.core.postoffice import RendezvousError

    def closes():
        handle = po.connections.handler("scheduler")[1]
        handle(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, b"")
        handle(zmq.EVENT_DISCONNECTED, 0, b"")
        return None                                 # the Van woken by the close
    po, van, clock = _registering(monkeypatch, [closes, None, None])
    with pytest.raises(RendezvousError, match="worker in dc0: the scheduler at "
                       "tcp://127.0.0.1:2 closed its connection before answering "
                       "registration") as gone:
        po.register(30)
    assert gone.value.caused_by_other
    assert van.waits[0] == 60 and 0.25 <= van.waits[1] < 0.3     # then the grace only
    assert clock.t < 101


def test_a_wake_with_the_scheduler_s_connection_up_goes_on_waiting(monkeypatch):
    from netstorm.geoserver.core.postoffice import RendezvousError
    error = wire.Message(wire.Kind.ERROR, sender=0, meta={"reason": "too late"})
    po, van, clock = _registering(monkeypatch, [None, error])
    with pytest.raises(RendezvousError, match="refused registration: too late"):
        po.register(30)
    assert van.waits == [60, 60]
    po, van, clock = _registering(monkeypatch, [None, None])
    with pytest.raises(RendezvousError, match="waited 60s for the scheduler"):
        po.register(30)
    assert clock.t == 160
