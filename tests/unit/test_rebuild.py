"""scheduler.rebuild: a new scheduler rebuilding a running cluster from its nodes' reports
(claims checked against the cluster file, finished workers, the policies adopted); no
sockets."""
import pytest
from netstorm.geoserver.config.cluster import DataCenter
from netstorm.geoserver.core.scheduler_watch import identity, report_meta
from netstorm.geoserver.policy.tree import Policy, Tree
from netstorm.scheduler.rebuild import Rebuild, RebuildError
from netstorm.scheduler.registration import Registration, layout

DCS = (DataCenter("eu", "127.0.0.1", 0, 2), DataCenter("us", "127.0.0.1", 0, 1))
STAR_EU = (Tree(root="eu", parent={"eu": None, "us": "eu"}),)
STAR_US = (Tree(root="us", parent={"us": None, "eu": "us"}),)
V1, V2 = Policy(1, 0, STAR_EU, (1.0,)), Policy(2, 12, STAR_US, (1.0,))


def running_table():
    """The table the first scheduler made: workers registered out of order."""
    registration = Registration(DCS)
    for n, (role, dc, index) in enumerate([("worker", "us", 0), ("server", "us", -1),
                                           ("worker", "eu", 1), ("server", "eu", -1),
                                           ("worker", "eu", 0)]):
        assert registration.add({"role": role, "dc": dc, "local_index": index,
                                 "address": f"tcp://127.0.0.1:{100 + n}"}) == ""
    return registration.table("tcp://127.0.0.1:99")


def register(node, **state):
    return {"role": node.role, "dc": node.dc, "address": node.address,
            "local_index": node.local_rank, "report": report_meta(node, **state)}


def server_state(table, node, policies=(V1,), rnd=10, opened=0):
    return {"policies": [p.to_json() for p in policies], "round": rnd, "opened": opened,
            "requested": rnd, "workers": [w.to_json() for w in table.workers(node.dc)],
            "keys": [[0, rnd]]}


def everyone(rebuild, table, skip=(), policies=None, finished=()):
    for node in table.nodes.values():
        if node.role == "scheduler" or node.id in skip:
            continue
        state = server_state(table, node, **(policies or {}).get(node.dc, {})) \
            if node.role == "server" else {"finished": list(finished)}
        assert rebuild.add(register(node, **state)) == "", node


def test_layout_is_what_registration_assigns_in_any_order():
    table = running_table()
    assert layout(DCS) == {n.id: (n.role, n.dc, n.rank, n.local_rank)
                           for n in table.nodes.values()}


def test_every_report_rebuilds_the_same_table_and_adopts_the_servers_state():
    table = running_table()
    rebuild = Rebuild(DCS)
    assert rebuild.describe_missing() == ("server of eu (node 1), server of us (node 2), "
                                          "worker rank 0 (eu/0, node 3), worker rank 1 "
                                          "(eu/1, node 4), worker rank 2 (us/0, node 5)")
    everyone(rebuild, table, policies={"eu": {"opened": 11}})
    assert rebuild.complete
    rebuilt = rebuild.table("tcp://127.0.0.1:99")
    assert identity(rebuilt) == identity(table)
    assert rebuilt.to_json() == table.to_json()
    plan = rebuild.policies()
    assert plan.latest == V1 and plan.resend == {}
    assert rebuild.rounds() == {1: 10, 2: 10} and rebuild.opened() == 11


def test_a_node_reporting_again_replaces_its_report():
    table = running_table()
    rebuild = Rebuild(DCS)
    eu = table.server_of("eu")
    assert rebuild.add(register(eu, **server_state(table, eu, rnd=3))) == ""
    assert rebuild.add(register(eu, **server_state(table, eu, rnd=4))) == ""
    assert rebuild.reports[eu.id].round == 4


@pytest.mark.parametrize("change, problem", [
    (lambda m: {**m, "report": None} | {"report": None},
     "only its nodes may register, with their report"),
    (lambda m: {k: v for k, v in m.items() if k != "report"},
     "only its nodes may register, with their report"),
    (lambda m: _claim(m, id=1), "node 1 claims to be a worker of 'eu' (rank 1, local 1); "
                                "the cluster file makes it a server of 'eu'"),
    (lambda m: _claim(m, rank=2), "node 4 claims to be a worker of 'eu' (rank 2, local 1); "
                                  "the cluster file makes it a worker of 'eu' (rank 1, "
                                  "local 1)"),
    (lambda m: _claim(m, id=0), "node id 0 is no server's or worker's of this cluster"),
    (lambda m: _claim(m, id=77), "node id 77 is no server's or worker's of this cluster"),
    (lambda m: {**m, "address": "tcp://127.0.0.1:1"}, "contradicts its REGISTER"),
    (lambda m: {**m, "dc": "us"}, "contradicts its REGISTER"),
])
def test_claims_the_cluster_file_contradicts_are_refused(change, problem):
    table = running_table()
    worker = next(n for n in table.workers() if n.rank == 1)
    assert problem in Rebuild(DCS).add(change(register(worker, finished=[])))


def _claim(meta, **fields):
    node = {**meta["report"]["node"], **fields}
    return {**meta, "report": {**meta["report"], "node": node}}


def test_a_second_process_claiming_a_reported_id_is_refused():
    table = running_table()
    rebuild = Rebuild(DCS)
    worker = table.workers()[0]
    assert rebuild.add(register(worker, finished=[])) == ""
    other = {**register(worker, finished=[]), "address": "tcp://127.0.0.1:5"}
    other["report"]["node"]["address"] = "tcp://127.0.0.1:5"
    assert "already reported from tcp://127.0.0.1:10" in rebuild.add(other)


def test_a_server_listing_another_dcs_worker_is_refused():
    table = running_table()
    eu = table.server_of("eu")
    state = server_state(table, eu)
    state["workers"] = [w.to_json() for w in table.workers("us")]
    assert "no worker of eu" in Rebuild(DCS).add(register(eu, **state))


def test_finished_workers_are_not_awaited_and_come_from_their_servers_report():
    table = running_table()
    gone = next(n for n in table.workers() if n.rank == 1)
    rebuild = Rebuild(DCS)
    everyone(rebuild, table, skip={gone.id}, finished=[1])
    assert rebuild.complete and rebuild.finished() == {gone.id}
    assert rebuild.table("tcp://127.0.0.1:99").to_json() == table.to_json()


def test_a_finished_worker_no_server_lists_cannot_be_rebuilt():
    table = running_table()
    gone = next(n for n in table.workers() if n.rank == 1)
    rebuild = Rebuild(DCS)
    everyone(rebuild, table, skip={gone.id}, finished=[1])
    eu = table.server_of("eu")
    state = server_state(table, eu)
    state["workers"] = []
    assert rebuild.add(register(eu, **state)) == ""
    with pytest.raises(RebuildError, match=r"worker rank 1 \(eu/1, node 4\) finished, and "
                                           r"no server's report lists it"):
        rebuild.table("tcp://127.0.0.1:99")


def test_a_version_announced_to_some_servers_only_is_sent_to_the_others_before_it_starts():
    table = running_table()
    rebuild = Rebuild(DCS)
    everyone(rebuild, table, policies={"eu": {"policies": (V1, V2)}})
    plan = rebuild.policies()
    assert plan.latest == V2
    assert plan.resend == {table.server_of("us").id: [V2]}


def test_a_version_a_server_lacks_in_a_round_it_started_is_refused_naming_it():
    table = running_table()
    rebuild = Rebuild(DCS)
    everyone(rebuild, table, policies={"eu": {"policies": (V1, V2), "rnd": 12},
                                       "us": {"rnd": 12}})
    with pytest.raises(RebuildError, match="the server of us lacks policy 2 .* already "
                                           "started round 12"):
        rebuild.policies()


def test_a_superseded_version_a_server_no_longer_reports_is_no_conflict():
    table = running_table()
    rebuild = Rebuild(DCS)
    everyone(rebuild, table, policies={"eu": {"policies": (V1, V2), "rnd": 12},
                                       "us": {"policies": (V2,), "rnd": 13}})
    plan = rebuild.policies()
    assert plan.latest == V2 and plan.resend == {}


def test_one_version_held_differently_is_refused_naming_both_dcs():
    table = running_table()
    rebuild = Rebuild(DCS)
    other = Policy(2, 12, STAR_EU, (1.0,))
    everyone(rebuild, table, policies={"eu": {"policies": (V1, V2)},
                                       "us": {"policies": (V1, other)}})
    with pytest.raises(RebuildError, match="the servers of eu and us hold policy 2 "
                                           "differently"):
        rebuild.policies()


def test_no_policy_anywhere_is_refused():
    table = running_table()
    rebuild = Rebuild(DCS)
    everyone(rebuild, table, policies={"eu": {"policies": ()}, "us": {"policies": ()}})
    with pytest.raises(RebuildError, match="no server holds a policy"):
        rebuild.policies()
