"""scheduler/service.py's Scheduler.run when the scheduler itself fails (its other paths
run live in tests/cluster/test_service.py): every unfinished node is told at once, naming
the scheduler and the cause, and the error still reaches the entry point's catch-all."""
from types import SimpleNamespace

import pytest

from netstorm.geoserver.core.nodes import SCHEDULER, SERVER
from netstorm.scheduler.service import Scheduler


def test_the_schedulers_own_failure_aborts_every_unfinished_node_naming_the_cause():
    scheduler = Scheduler.__new__(Scheduler)        # no sockets: only what run() touches
    told = []
    nodes = {0: SimpleNamespace(id=0, role=SCHEDULER), 1: SimpleNamespace(id=1, role=SERVER),
             2: SimpleNamespace(id=2, role="worker"), 3: SimpleNamespace(id=3, role="worker")}
    scheduler.table, scheduler.finished = SimpleNamespace(nodes=nodes), {3}

    def fail():
        raise OverflowError("cannot convert float infinity to integer")
    scheduler.rendezvous, scheduler.serve = (lambda: None), fail
    scheduler._abort_nodes = lambda targets, reason: told.append(([t.id for t in targets],
                                                                  reason))
    with pytest.raises(OverflowError):
        scheduler.run()
    reason = "the scheduler failed: OverflowError: cannot convert float infinity to integer"
    assert told == [([1, 2], reason)] and scheduler.abort_reason == reason


def test_a_worker_s_heartbeat_tells_liveness_its_data_path():
    """A server's beat carries its round; a worker's, its data path (scheduler/stalls.py)."""
    from netstorm.geoserver.core import wire
    scheduler = Scheduler.__new__(Scheduler)        # no sockets: only what the handler uses
    heard = []
    scheduler.liveness = SimpleNamespace(heard=lambda node, meta: heard.append((node, meta)),
                                         heartbeat=lambda node, meta: None)
    scheduler._on_heartbeat(wire.Message(wire.Kind.HEARTBEAT, sender=3,
                                         meta={"quiet_s": 2.0, "waits": [[0, 1, 1.5]]}))
    assert heard == [(3, {"quiet_s": 2.0, "waits": [[0, 1, 1.5]]})]


def test_a_server_s_audit_rows_go_to_the_replica_audit_and_a_worker_s_do_not():
    """docs/recovery-audit.md: only a server's heartbeat speaks for its DC's replica."""
    from netstorm.geoserver.core import wire
    scheduler = Scheduler.__new__(Scheduler)        # no sockets: only what the handler uses
    audited = []
    nodes = {1: SimpleNamespace(id=1, role=SERVER, dc="dc0"),
             3: SimpleNamespace(id=3, role="worker", dc="dc0")}
    scheduler.table = type("Table", (), {"__getitem__": lambda self, i: nodes[i]})()
    scheduler.liveness = SimpleNamespace(step_s={}, heartbeat=lambda *args: None)
    scheduler.policies = SimpleNamespace(report=lambda *args: None)
    scheduler.status = None
    scheduler.auditing = SimpleNamespace(on_heartbeat=lambda dc, rows: audited.append((dc,
                                                                                       rows)))
    rows = [[0, 10, "a" * 64, 10]]
    for sender in (1, 3):
        scheduler._on_heartbeat(wire.Message(wire.Kind.HEARTBEAT, sender=sender,
                                             meta={"round": 10, "audit": rows}))
    assert audited == [("dc0", rows)]
def test_elastic_a_node_that_stops_makes_its_dc_leave_else_the_run_aborts():
    """ABORT from a node (a server stopped by SIGTERM tells the scheduler so): with
    [elastic] its DC leaves the run (scheduler/departing.py); otherwise the run aborts
    naming it."""
    from netstorm.geoserver.core import wire
    from netstorm.scheduler.liveness import ClusterAborted
    scheduler = Scheduler.__new__(Scheduler)        # no sockets: only what the handler uses
    departed = []
    scheduler.liveness = SimpleNamespace(depart=lambda node, why: departed.append(
        (node, why)) or node == 3)
    scheduler.table = SimpleNamespace(describe=lambda node: f"server of dc{node - 1}")
    stop = wire.Message(wire.Kind.ABORT, sender=3, meta={"reason": "stopped by SIGTERM"})
    scheduler._on_abort(stop)
    assert departed == [(3, "stopped: stopped by SIGTERM")]
    with pytest.raises(ClusterAborted, match="server of dc1 aborted: stopped by SIGTERM"):
        scheduler._on_abort(wire.Message(wire.Kind.ABORT, sender=2,
                                         meta={"reason": "stopped by SIGTERM"}))
