"""scheduler.rebuilding: a new scheduler's rendezvous of a running cluster, driven through
the Scheduler's own loop with a Van that holds messages in lists (no sockets): what it
adopts and tells every node, what it refuses, and the timeout naming who is missing."""
import time

import pytest
from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.core.scheduler_watch import report_meta
from netstorm.geoserver.core.wire import Kind, Message
from netstorm.geoserver.policy.tree import Policy
from netstorm.scheduler.policy import initial_policy
from netstorm.scheduler.registration import Registration
from netstorm.scheduler.service import ClusterAborted, Scheduler


class ListVan:
    """What the scheduler's loop uses of a Van: ``inbox`` is read, sends are kept."""

    def __init__(self, inbox):
        self.inbox, self.sent, self.address, self.node_id = list(inbox), [], "tcp://s:1", None

    def recv(self, timeout_s):
        if self.inbox:
            return self.inbox.pop(0)
        time.sleep(min(timeout_s, 0.01))
        return None

    def send(self, peer, msg):
        self.sent.append((peer, msg))

    def connect(self, peer, address, *args, **kwargs):
        pass

    def disconnect(self, peer, *args, **kwargs):
        pass

    def is_connected(self, peer):
        return True

    def pending(self):
        return bool(self.inbox)


def cluster(timeout_s=30.0, worker_restarts=0):
    config = pseudo_cluster(2, 1, 9, heartbeat_s=0.05, dead_after_s=0.2, timeout_s=timeout_s,
                            scheduler_restarts=1, worker_restarts=worker_restarts)
    registration = Registration(config.dcs)
    for n, (role, dc) in enumerate([("server", "dc0"), ("server", "dc1"), ("worker", "dc0"),
                                    ("worker", "dc1")]):
        registration.add({"role": role, "dc": dc, "address": f"tcp://127.0.0.1:{10 + n}",
                          "local_index": 0 if role == "worker" else -1})
    return config, registration.table("tcp://s:1")


def reports(table, first, later=None, skip=()):
    """The REGISTERs of every node; dc0's server holds ``later`` too."""
    msgs = []
    for node in table.nodes.values():
        if node.role == "scheduler" or node.id in skip:
            continue
        if node.role == "server":
            held = [first] + ([later] if later and node.dc == "dc0" else [])
            state = {"policies": [p.to_json() for p in held], "round": 7, "opened": 0,
                     "requested": 7, "workers": [w.to_json() for w in table.workers(node.dc)]}
        else:
            state = {"finished": []}
        msgs.append(Message(Kind.REGISTER, origin=node.dc, meta={
            "role": node.role, "dc": node.dc, "address": node.address,
            "local_index": node.local_rank, "report": report_meta(node, **state)}))
    return msgs


def test_a_new_scheduler_takes_the_running_cluster_over_and_tells_every_node():
    config, table = cluster()
    first, _ = initial_policy(config)
    later = Policy(first.version + 1, 9, first.trees, first.shares)
    stranger = Message(Kind.REGISTER, origin="dc1", meta={"role": "worker", "dc": "dc1",
                                                          "address": "tcp://127.0.0.1:99"})
    van = ListVan([Message(Kind.HEARTBEAT, sender=3, meta={}), *reports(table, first, later)])
    van.inbox.insert(2, stranger)
    scheduler = Scheduler(config, van)
    rebuilt = scheduler.rendezvous()
    assert rebuilt.to_json() == table.to_json()
    welcomes = {peer: m.meta for peer, m in van.sent if m.kind == Kind.WELCOME}
    assert sorted(welcomes) == [1, 2, 3, 4] and all(m["rebuilt"] for m in welcomes.values())
    assert [(peer, m.meta["policy"]["version"]) for peer, m in van.sent
            if m.kind == Kind.POLICY] == [(2, later.version)]      # dc1 lacked it
    assert [(peer, m.meta["reason"]) for peer, m in van.sent if m.kind == Kind.ERROR] == \
        [("tcp://127.0.0.1:99", "this scheduler is rebuilding a running cluster: only its "
                                "nodes may register, with their report (a fresh node joins "
                                "no running cluster)")]
    assert scheduler.rounds.policy == later and scheduler.rounds.latest == 7
    assert scheduler.rebuilding.rebuilt_at is not None
    # the next version it plans is numbered after every one held and starts after every
    # server's round (never before the latest version's start)
    van.sent.clear()
    policy = scheduler.announce(first.trees, first.shares, lead_rounds=1)
    assert policy.version == later.version + 1 and policy.start_round >= 9
    assert sorted(peer for peer, m in van.sent if m.kind == Kind.POLICY) == [1, 2]


def test_a_node_that_does_not_come_back_ends_the_rebuild_naming_it():
    config, table = cluster(timeout_s=0.3)
    first, _ = initial_policy(config)
    van = ListVan(reports(table, first, skip={4}))
    with pytest.raises(ClusterAborted, match=r"waited timeout_s = 0.3s for the running "
                                             r"cluster's nodes to re-register; still "
                                             r"missing: worker rank 1 \(dc1/0, node 4\)"):
        Scheduler(config, van).rendezvous()
    assert sorted(peer for peer, m in van.sent if m.kind == Kind.ABORT) == [1, 2, 3]


def test_reports_that_cannot_be_taken_over_end_the_rebuild_with_the_reason():
    config, table = cluster()
    first, _ = initial_policy(config)
    from netstorm.geoserver.policy.tree import Tree
    clash = Policy(first.version, 0, (Tree(root="dc1", parent={"dc1": None, "dc0": "dc1"}),),
                   (1.0,))
    assert clash != first
    msgs = reports(table, first)
    meta = msgs[1].meta["report"]
    meta["policies"] = [clash.to_json()]
    with pytest.raises(ClusterAborted, match="cannot take the running cluster over: the "
                                             "servers of dc0 and dc1 hold policy"):
        Scheduler(config, ListVan(msgs)).rendezvous()


def taken_over():
    """A new scheduler that took the running cluster over, its sends cleared:
    ``(scheduler, van, table, first policy)``."""
    config, table = cluster()
    first, _ = initial_policy(config)
    van = ListVan(reports(table, first))
    scheduler = Scheduler(config, van)
    scheduler.rendezvous()
    van.sent.clear()
    return scheduler, van, table, first


def test_a_re_registration_while_running_is_welcomed_again_only_as_the_node_of_the_table():
    scheduler, van, table, first = taken_over()
    again = reports(table, first)[2]            # worker rank 0, once more
    scheduler._dispatch(again)
    assert [(peer, m.kind) for peer, m in van.sent] == [(3, Kind.WELCOME)]
    van.sent.clear()
    moved = reports(table, first)[2]
    moved.meta["report"]["node"]["address"] = moved.meta["address"] = "tcp://10.0.0.1:1"
    scheduler._dispatch(moved)
    assert van.sent == []


def test_a_node_of_a_dc_that_left_re_registering_is_told_its_dc_left():
    """A node cut off from the scheduler re-registers once its link is back; if its DC
    left the run meanwhile (elastic), it is not welcomed but told (ABORT with left)."""
    scheduler, van, table, first = taken_over()
    again = reports(table, first)[3]            # worker rank 1, dc1
    scheduler.departing.departed_nodes |= {again.meta["report"]["node"]["id"]}
    scheduler._dispatch(again)
    assert [(m.kind, m.meta.get("left")) for _, m in van.sent] == [(Kind.ABORT, True)]


def fresh_worker(dc, port):
    return Message(Kind.REGISTER, origin=dc, meta={"role": "worker", "dc": dc, "local_index": 0,
                                                   "address": f"tcp://127.0.0.1:{port}"})


@pytest.mark.parametrize("first", [True, False])
def test_a_worker_restarted_while_the_scheduler_was_away_is_taken_back_into_its_rank(first):
    """worker_restarts: a worker that died while the scheduler was away sends no report;
    its restarted process's fresh REGISTER (before the first report, or among them) stands
    in for it: the cluster is taken over with it lost, then the REGISTER takes its rank
    back (WELCOME rejoined, its server told where it now is)."""
    config, table = cluster(worker_restarts=1)
    first_policy, _ = initial_policy(config)
    msgs = reports(table, first_policy, skip={4})
    msgs.insert(0 if first else 2, fresh_worker("dc1", 77))
    van = ListVan(msgs)
    scheduler = Scheduler(config, van)
    rebuilt = scheduler.rendezvous()
    assert rebuilt[4].address == "tcp://127.0.0.1:77" and 4 not in scheduler.lost
    welcomes = {peer: m.meta for peer, m in van.sent if m.kind == Kind.WELCOME}
    assert sorted(welcomes) == [1, 2, 3, 4]
    assert welcomes[4]["rejoined"] and not welcomes[4]["rebuilt"] and welcomes[3]["rebuilt"]
    assert [(peer, m.meta["node"]["address"]) for peer, m in van.sent
            if m.kind == Kind.NODE_MOVED] == [(2, "tcp://127.0.0.1:77")]


def test_without_worker_restarts_a_fresh_registration_is_refused_while_rebuilding():
    config, table = cluster(timeout_s=0.3)
    first, _ = initial_policy(config)
    msgs = reports(table, first, skip={4})
    msgs.insert(1, fresh_worker("dc1", 77))
    van = ListVan(msgs)
    with pytest.raises(ClusterAborted, match=r"still missing: worker rank 1"):
        Scheduler(config, van).rendezvous()
    assert [peer for peer, m in van.sent if m.kind == Kind.ERROR] == ["tcp://127.0.0.1:77"]


def test_with_worker_restarts_a_worker_that_does_not_come_back_is_awaited_as_lost():
    config, table = cluster(timeout_s=0.3, worker_restarts=1)
    first, _ = initial_policy(config)
    scheduler = Scheduler(config, ListVan(reports(table, first, skip={4})))
    rebuilt = scheduler.rendezvous()
    assert rebuilt.to_json() == table.to_json() and 4 in scheduler.lost
