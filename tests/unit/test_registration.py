"""scheduler.registration: who may register, what is missing, ids and ranks; no sockets."""
import pytest
from netstorm.geoserver.config.cluster import DataCenter
from netstorm.scheduler.registration import SCHEDULER_ID, Registration

DCS = (DataCenter("eu", "127.0.0.1", 0, 2), DataCenter("us", "127.0.0.1", 0, 1))


def reg(role, dc, port, local_index=-1):
    return {"role": role, "dc": dc, "address": f"tcp://127.0.0.1:{port}",
            "local_index": local_index}


def test_missing_names_every_role_and_dc_in_file_order():
    registration = Registration(DCS)
    assert registration.missing() == ["1 server(s) of eu", "2 worker(s) of eu",
                                      "1 server(s) of us", "1 worker(s) of us"]
    assert registration.add(reg("worker", "eu", 1)) == ""
    assert registration.add(reg("server", "us", 2)) == ""
    assert registration.missing() == ["1 server(s) of eu", "1 worker(s) of eu",
                                      "1 worker(s) of us"]
    assert not registration.complete
    assert registration.progress() == ("2 of 5 nodes registered; missing: 1 server(s) of eu, "
                                       "1 worker(s) of eu, 1 worker(s) of us")


@pytest.mark.parametrize("meta,problem", [
    ({"role": "pilot", "dc": "eu", "address": "tcp://x:1"}, "unknown role 'pilot'"),
    ({"role": "worker", "dc": "mars", "address": "tcp://x:1"},
     "unknown DC 'mars'; the cluster has ['eu', 'us']"),
    ({"role": "worker", "dc": 3, "address": "tcp://x:1"}, "unknown DC 3; the cluster has ['eu', 'us']"),
    ({"role": "worker", "dc": "eu"}, "registration carries no address"),
    (reg("server", "eu", 9), "eu already has all its servers registered"),
    (reg("worker", "eu", 9, local_index="0"), "local_index must be an integer"),
    (reg("worker", "eu", 9, local_index=0), "eu already has a worker with local index 0"),
    ({**reg("worker", "us", 9), "local_address": "tcp://10.0.0.9:1"},
     "local_address 'tcp://10.0.0.9:1' is not an ipc:// endpoint"),
])
def test_bad_registrations_are_refused_with_the_reason(meta, problem):
    registration = Registration(DCS)
    registration.add(reg("server", "eu", 1))
    registration.add(reg("worker", "eu", 2, local_index=0))
    before = list(registration.registered)
    assert registration.add(meta) == problem
    assert registration.check(meta) == problem
    assert registration.registered == before          # nothing was taken


def test_ids_and_ranks_follow_the_file_not_the_arrival_order():
    registration = Registration(DCS)
    for meta in [reg("worker", "us", 1), reg("server", "us", 2), reg("worker", "eu", 3),
                 reg("worker", "eu", 4, local_index=0), reg("server", "eu", 5)]:
        assert registration.add(meta) == ""
    assert registration.complete
    table = registration.table("tcp://127.0.0.1:9000")
    assert table.scheduler().id == SCHEDULER_ID
    assert [(table.server_of(dc).id, table.server_of(dc).address[-1]) for dc in ("eu", "us")] \
        == [(1, "5"), (2, "2")]
    workers = [(n.id, n.dc, n.rank, n.local_rank, n.address[-1]) for n in table.workers()]
    # eu's explicit local index 0 first, then eu's other in registration order, then us
    assert workers == [(3, "eu", 0, 0, "4"), (4, "eu", 1, 1, "3"), (5, "us", 2, 0, "1")]


def test_a_registration_without_local_index_is_ranked_after_explicit_ones():
    registration = Registration((DataCenter("eu", "127.0.0.1", 0, 2),))
    registration.add(reg("server", "eu", 1))
    registration.add({"role": "worker", "dc": "eu", "address": "tcp://127.0.0.1:2"})
    registration.add(reg("worker", "eu", 3, local_index=1))
    ranks = [(n.address[-1], n.local_rank) for n in
             registration.table("tcp://127.0.0.1:9").workers()]
    assert ranks == [("3", 0), ("2", 1)]


def test_the_table_carries_where_a_dc_s_nodes_on_one_host_meet():
    registration = Registration(DCS)
    registration.add({**reg("server", "eu", 1), "host": "h1", "local_address": "ipc:///t/s"})
    node = registration.table("tcp://127.0.0.1:9").server_of("eu")
    assert (node.host, node.local_address) == ("h1", "ipc:///t/s")


def test_a_node_of_a_running_cluster_cannot_join_a_new_one():
    """A REGISTER with a report (a node whose scheduler died) is no fresh registration."""
    registration = Registration(DCS)
    problem = registration.add({**reg("worker", "eu", 1), "report": {"node": {}}})
    assert "a node of a running one" in problem and registration.registered == []
def test_elastic_the_run_starts_with_min_dcs_complete_and_holds_the_others_places():
    dcs = DCS + (DataCenter("ap", "127.0.0.1", 9300, 1),)
    registration = Registration(dcs)
    for meta in (reg("server", "eu", 1), reg("worker", "eu", 2, 0), reg("worker", "eu", 3, 1)):
        registration.add(meta)
    assert registration.complete_dcs() == ["eu"] and not registration.ready(2)
    registration.add(reg("server", "us", 4))
    assert not registration.ready(1)            # us is half registered: awaited
    registration.add(reg("worker", "us", 5, 0))
    assert registration.ready(2) and registration.ready(1) and not registration.ready(0)
    assert not registration.ready(3)
    assert registration.hold_places(lambda dc: f"tcp://{dc.host}:{dc.server_port}") == ["ap"]
    table = registration.table("tcp://127.0.0.1:9")
    ap = [n for n in table.nodes.values() if n.dc == "ap"]
    # the file's ids and ranks: servers in file order, then the workers DC by DC
    assert [(n.id, n.role, n.rank, n.address) for n in ap] == [
        (3, "server", -1, "tcp://127.0.0.1:9300"), (7, "worker", 3, "tcp://127.0.0.1:9300")]
