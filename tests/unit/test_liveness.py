"""The scheduler's view of which nodes live (scheduler/liveness.py): heartbeats, a silent
node lost or fatal, a new process superseding one, and a worker's stop note."""
import time

import pytest
import zmq

from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
from netstorm.scheduler.liveness import ClusterAborted, Liveness


class Van:
    """Records what the scheduler sends; every node is connected."""
    def __init__(self):
        self.sent = []

    def is_connected(self, node_id):
        return True

    def send(self, node_id, msg):
        """The round-trip fields every HEARTBEAT carries are left out (tested below)."""
        meta = {k: v for k, v in msg.meta.items() if k not in ("t", "rtt")} \
            if msg.kind == wire.Kind.HEARTBEAT else msg.meta
        self.sent.append((node_id, msg.kind, meta))
        self.beats = getattr(self, "beats", []) + [msg.meta] \
            if msg.kind == wire.Kind.HEARTBEAT else getattr(self, "beats", [])


TABLE = [NodeInfo(0, "scheduler", "", "tcp://s:1"),
         NodeInfo(1, "server", "dc0", "tcp://a:1"), NodeInfo(2, "server", "dc1", "tcp://b:1"),
         NodeInfo(3, "worker", "dc0", "tcp://a:2", rank=0, local_rank=0),
         NodeInfo(4, "worker", "dc1", "tcp://b:2", rank=1, local_rank=0)]


def _liveness(**recovery):
    config = pseudo_cluster(2, 1, 1, **recovery)
    liveness = Liveness(config, Van(), check_stop=lambda: None)
    liveness.table = NodeTable(TABLE)
    return liveness


def test_every_running_node_hears_a_heartbeat_and_servers_the_other_dcs_slowest_step():
    """A server hears the slowest step of the other DCs only: its own DC's figure, a beat
    old, would make its slowest worker take two steps when the worker got faster."""
    liveness = _liveness()
    liveness.finished.add(4)
    liveness.step_s.update(dc0=0.5, dc1=0.75)
    liveness.beat()
    assert liveness.van.sent == [(1, wire.Kind.HEARTBEAT, {"step_s": 0.75}),
                                 (2, wire.Kind.HEARTBEAT, {"step_s": 0.5}),
                                 (3, wire.Kind.HEARTBEAT, {})]
    liveness.beat()                             # not due again before heartbeat_s
    assert len(liveness.van.sent) == 3


def test_a_silent_node_aborts_the_run_naming_it_unless_it_may_restart():
    liveness = _liveness()
    liveness.last_seen = {3: time.monotonic() - 3600, 1: time.monotonic()}
    with pytest.raises(ClusterAborted, match=r"worker rank 0 \(dc0/0, node 3\) sent nothing "
                                             r"for .*it is presumed dead"):
        liveness.check(None)
    liveness = _liveness(worker_restarts=1)
    liveness.last_seen = {3: time.monotonic() - 3600}
    liveness.check(None)
    assert 3 in liveness.lost and 3 not in liveness.last_seen


def test_recovery_awaits_several_servers_lost_at_once_or_during_a_replacement():
    """Each lost server is awaited while its own restarts last (scheduler/replacing.py
    replaces them as one); past them, the loss is fatal."""
    liveness = _liveness(server_restarts=1)
    assert liveness.lose(1, "sent nothing", replacing=True)
    assert liveness.lose(2, "sent nothing", replacing=False)       # one is lost already
    del liveness.lost.lost[1]
    assert not liveness.lose(1, "sent nothing", replacing=False)   # its restart is used


def test_a_new_process_in_a_worker_s_rank_supersedes_it():
    liveness = _liveness(worker_restarts=1)
    liveness.supersede({"role": "worker", "dc": "dc1", "local_index": 0}, replacing=False)
    assert 4 in liveness.lost and 3 not in liveness.lost


def test_a_finished_worker_is_announced_to_those_still_running_and_esync_servers():
    liveness = _liveness()
    bye = wire.Message(wire.Kind.BYE, sender=3, meta={"clean": True, "pushes": [[0, 7]]})
    liveness.bye(bye, replacing=False, esync=True)
    left = {"rank": 0, "pushes": [[0, 7]], "who": "worker rank 0 (dc0/0, node 3)"}
    assert liveness.finished == {3}
    assert liveness.van.sent == [(4, wire.Kind.WORKER_LEFT, left),
                                 (1, wire.Kind.WORKER_LEFT, left),
                                 (2, wire.Kind.WORKER_LEFT, left)]
    assert liveness.departures == {3: left}     # a replaced server hears it again
    failed = wire.Message(wire.Kind.BYE, sender=4, meta={"clean": False, "reason": "oom"})
    with pytest.raises(ClusterAborted, match=r"worker rank 1 \(dc1/0, node 4\) failed: oom"):
        liveness.bye(failed, replacing=False, esync=False)


def test_a_waiting_worker_hears_what_its_round_lacks_and_a_stall_is_warned_then_fatal(caplog):
    """The workers' beats say what they pushed and wait for (scheduler/stalls.py): the one
    waiting hears who has not pushed its round; the silent one is warned of once (again
    when its silence doubled) and, silent for max_idle_s, aborts the run, named."""
    liveness, stalls = _liveness(max_idle_s=6.0), []
    liveness._on_stall = stalls.append         # the scheduler's stats (the status page's events)
    liveness.heard(3, {"quiet_s": 0.0, "pushed": [[1, [0]]], "waits": [[0, 1, 1.0]]})
    liveness.heard(4, {"quiet_s": 3.5})
    liveness.beat()
    assert (3, wire.Kind.HEARTBEAT, {"missing": [[0, 1, ["dc1/0 (rank 1)"]]]}) in \
        liveness.van.sent and (4, wire.Kind.HEARTBEAT, {}) in liveness.van.sent
    liveness.check(None)        # a stall from half max_idle_s
    liveness._next_judgement = 0.0
    liveness.check(None)        # not warned again before its silence doubled
    warned = [r.message for r in caplog.records if r.message.startswith("stall:")]
    assert len(warned) == 1 and warned[0].startswith("stall: rank 1 (dc1/0) sent nothing for ")
    assert warned[0].endswith(" s; rank 0 waits on it") and stalls == [warned[0]]
    liveness.heard(4, {"quiet_s": 6.5})
    liveness._next_judgement = 0.0
    with pytest.raises(ClusterAborted, match=r"^worker rank 1 \(dc1/0, node 4\) sent nothing "
                                             r"on the data path for 6\.\ds while rank 0 waits "
                                             r"on it \(max_idle_s = 6\): it is presumed hung$"):
        liveness.check(None)


def test_no_stall_is_judged_while_a_lost_worker_is_awaited():
    liveness = _liveness(worker_restarts=1, max_idle_s=2.0)
    liveness.heard(3, {"quiet_s": 0.0, "waits": [[0, 1, 1.0]]})
    liveness.heard(4, {"quiet_s": 30.0})
    liveness.lose(4, "sent nothing", replacing=False)
    liveness.check(None)            # it is awaited back, not hung


# ---------------------------------------------------------------- fast detection
# (docs/recovery-detection.md): a closed connection at once, a silence past the learnt deadline

def _clocked(monkeypatch, **settings):
    """A Liveness on a clock the test moves, every node welcomed at its start."""
    import types

    from fakes import Clock
    from netstorm.geoserver.core.connection_watch import ConnectionWatch
    from netstorm.scheduler import liveness as module
    clock = Clock(1000.0)
    monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=clock))
    liveness = _liveness(**settings)
    liveness.connections = ConnectionWatch(clock=clock)
    liveness.last_seen = dict.fromkeys((1, 2, 3, 4), clock.t)
    return liveness, clock


def _beat_for(liveness, clock, seconds, every=0.5, nodes=(1, 2, 3, 4)):
    for _ in range(int(seconds / every)):
        clock.t += every
        for node in nodes:
            liveness.seen(node)
            liveness.heartbeat(node, {})


def test_a_closed_connection_is_a_verdict_after_its_grace_naming_the_node(monkeypatch):
    liveness, clock = _clocked(monkeypatch)
    handles = {n: liveness.connections.handler(n)[1] for n in (1, 2, 3, 4)}
    for handle in handles.values():
        handle(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, b"")
    handles[2](zmq.EVENT_DISCONNECTED, 0, b"")                # dc1's server was killed
    assert liveness.due_at() == pytest.approx(clock.t + 0.25)
    clock.t += 0.1
    liveness.check(None)                                        # within its grace
    clock.t += 0.2
    liveness.check(None, waiting=True)                          # its last words read first
    with pytest.raises(ClusterAborted, match=r"^server of dc1 \(node 2\) closed its "
                                             r"connection 0\.30s ago .* presumed dead$"):
        liveness.check(None)


def test_a_closed_connection_of_a_finished_worker_or_with_the_floor_off_is_no_verdict(
        monkeypatch):
    liveness, clock = _clocked(monkeypatch)
    handle = liveness.connections.handler(3)[1]
    handle(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, b"")
    handle(zmq.EVENT_DISCONNECTED, 0, b"")
    liveness.finished.add(3)                                    # it said BYE and ended
    clock.t += 1.0
    liveness.check(None)
    assert liveness.due_at() > clock.t
    old, clock = _clocked(monkeypatch, detect_floor_s=0.0)     # the old rule: silence only
    handle = old.connections.handler(4)[1]
    handle(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, b"")
    handle(zmq.EVENT_DISCONNECTED, 0, b"")
    clock.t += 5.0
    old.check(None)


def test_a_node_heard_regularly_and_then_silent_is_lost_within_about_a_second(monkeypatch):
    liveness, clock = _clocked(monkeypatch, worker_restarts=1)
    _beat_for(liveness, clock, 10.0)
    _beat_for(liveness, clock, 1.0, nodes=(1, 2, 3))            # worker 4 stopped (SIGSTOP)
    liveness.check(None)                                        # 1.0 s of silence
    assert 4 not in liveness.lost
    clock.t += 0.2                                              # 1.2 s
    liveness.check(None)
    assert 4 in liveness.lost and "its deadline 1.00s" in liveness.lost.lost[4].why


def test_during_start_up_a_silent_node_has_dead_after_s(monkeypatch):
    liveness, clock = _clocked(monkeypatch)                     # dead_after_s = 10
    _beat_for(liveness, clock, 1.5, nodes=(1, 2, 3))            # a few beats only
    clock.t += 5.0                                              # worker 4 importing MXNet
    liveness.check(None)
    assert liveness.deadline(4) == liveness.config.dead_after_s


def test_a_heartbeat_echo_measures_the_round_trip_which_the_next_beats_carry(monkeypatch):
    liveness, clock = _clocked(monkeypatch)
    liveness.beat()
    sent_at = liveness.van.beats[0]["t"]
    clock.t += 0.3                                              # 0.1 s held by the node
    liveness.heartbeat(1, {"echo": [sent_at, 0.1]})
    liveness.heartbeat(2, {"echo": [clock.t + 5, 0.0]})            # from the future: ignored
    liveness.heartbeat(3, {})
    assert liveness._silence.detector.rtt(1) == pytest.approx(0.2)
    assert liveness._silence.detector.rtt(2) == 0.0
    clock.t += 1.0
    liveness.beat()
    assert [b["rtt"] for b in liveness.van.beats[-4:]] == [pytest.approx(0.2), 0.0, 0.0, 0.0]


def test_a_node_lost_for_its_silence_is_taken_back_when_it_speaks_again(monkeypatch):
    """dc-stop / a cut link: the node was paused, not gone; one whose connection closed
    (its process ended) is not revived, and neither is one a new process replaced."""
    liveness, clock = _clocked(monkeypatch, worker_restarts=1, server_restarts=1)
    _beat_for(liveness, clock, 10.0)
    _beat_for(liveness, clock, 2.0, nodes=(1, 3))             # server 2 and worker 4 stopped
    liveness.check(None)
    assert 2 in liveness.lost and 4 in liveness.lost
    assert liveness.revive(4) and 4 not in liveness.lost      # SIGCONT: its beat came
    assert liveness.lost.remaining(4) == 1                    # its restart given back
    assert not liveness.revive(4)                             # taken back once
    worker, _ = liveness.lost.rejoin({"role": "server", "dc": "dc1", "address": "tcp://x:1"})
    assert worker is not None and not liveness.revive(2)      # a new process took its place
    handle = liveness.connections.handler(3)[1]
    handle(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, b"")
    handle(zmq.EVENT_DISCONNECTED, 0, b"")                    # worker 3's process ended
    clock.t += 0.5
    liveness.check(None)
    assert 3 in liveness.lost and not liveness.revive(3)      # awaited: a new process
