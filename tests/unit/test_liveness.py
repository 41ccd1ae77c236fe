"""The scheduler's view of which nodes live (scheduler/liveness.py): heartbeats, a silent
node lost or fatal, a new process superseding one, and a worker's stop note."""
import time

import pytest

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


def test_every_running_node_hears_a_heartbeat_and_servers_the_slowest_step():
    liveness = _liveness()
    liveness.finished.add(4)
    liveness.step_s.update(dc0=0.5, dc1=0.75)
    liveness.beat()
    assert liveness.van.sent == [(1, wire.Kind.HEARTBEAT, {"step_s": 0.75}),
                                 (2, wire.Kind.HEARTBEAT, {"step_s": 0.75}),
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


def test_a_second_server_lost_while_one_is_replaced_is_fatal():
    liveness = _liveness(server_restarts=2)
    assert not liveness.lose(1, "sent nothing", replacing=True)
    assert liveness.lose(1, "sent nothing", replacing=False)
    assert not liveness.lose(2, "sent nothing", replacing=False)   # one is lost already


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
