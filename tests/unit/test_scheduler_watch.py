"""geoserver.core.scheduler_watch: a node's watch on the scheduler, awaiting a new one with
scheduler_restarts, and the check of a new scheduler's WELCOME; no sockets, the clock
passed in."""
from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
from netstorm.geoserver.core.scheduler_watch import (SchedulerWatch, policies_in_use,
                                                     report_meta, welcome_refusal)
from netstorm.geoserver.policy.tree import Policy, PolicyBook, Tree

ADDRESS = "tcp://127.0.0.1:9"
TABLE = NodeTable([NodeInfo(0, "scheduler", "", ADDRESS),
                   NodeInfo(1, "server", "eu", "tcp://127.0.0.1:10"),
                   NodeInfo(2, "worker", "eu", "tcp://127.0.0.1:11", 0, 0)])


def watch(restarts=1):
    return SchedulerWatch(ADDRESS, dead_after_s=2.0, timeout_s=10.0,
                          restarts=restarts, now=100.0)


DEAD = f"the scheduler at {ADDRESS} sent nothing for 2.5s; it is presumed dead"


def test_without_restarts_the_verdict_ends_the_node():
    w = watch(restarts=0)
    assert w.check(101.9, "") == ""
    assert w.check(102.5, DEAD) == DEAD


def test_with_restarts_a_new_scheduler_is_awaited_for_timeout_s_then_named():
    w = watch()
    assert w.check(102.5, DEAD) == "" and w.lost
    w.heard(103.0)                      # an old scheduler's queued beat: still lost
    assert w.lost and w.check(112.4, "") == ""
    assert w.check(112.6, "") == (
        f"the scheduler at {ADDRESS} sent nothing for 12.6s and no new scheduler took the "
        f"cluster over within timeout_s = 10s ([recovery] scheduler_restarts = 1)")


def test_a_new_schedulers_welcome_ends_the_wait():
    w = watch()
    w.check(102.5, DEAD)
    w.back(105.0)
    assert not w.lost and w.takeovers == 1
    assert w.check(106.9, "") == ""
    assert w.check(107.1, DEAD) == "" and w.lost        # lost again: awaited again


def welcome(**meta):
    return {"nodes": TABLE.to_json(), "you": 2, "rebuilt": True, **meta}


def test_a_new_schedulers_welcome_must_keep_the_table():
    assert welcome_refusal(TABLE, 2, welcome()) == ""
    assert "not rebuilt" in welcome_refusal(TABLE, 2, welcome(rebuilt=False))
    assert "addressed to node 1" in welcome_refusal(TABLE, 2, welcome(you=1))
    renumbered = [{**n, "rank": 5} if n["role"] == "worker" else n for n in TABLE.to_json()]
    assert "differs from this node's" in welcome_refusal(TABLE, 2, welcome(nodes=renumbered))
    assert "malformed node table" in welcome_refusal(TABLE, 2, welcome(nodes=[{"id": 1}]))


def test_a_server_reports_the_versions_a_round_from_its_own_may_still_use():
    trees = (Tree(root="eu", parent={"eu": None}),)
    book = PolicyBook()
    for version, start in [(1, 0), (2, 5), (3, 9), (4, 20)]:
        book.add(Policy(version, start, trees, (1.0,)))
    assert [p.version for p in policies_in_use(book, 12)] == [3, 4]
    assert [p.version for p in policies_in_use(book, 0)] == [1, 2, 3, 4]
    late = PolicyBook(Policy(7, 30, trees, (1.0,)))
    assert [p.version for p in policies_in_use(late, 3)] == [7]
    assert report_meta(TABLE[2], finished=[1]) == {"node": TABLE[2].to_json(),
                                                  "finished": [1]}
