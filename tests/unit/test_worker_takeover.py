"""geoserver.worker.takeover: a worker when its scheduler dies (re-registering with its
report, a new scheduler's WELCOME, its BYE acknowledged); no sockets."""
import logging
import threading
import types

from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
from netstorm.geoserver.core.ratelog import RateLimitedLog
from netstorm.geoserver.core.wire import Kind, Message
from netstorm.geoserver.worker.takeover import SchedulerTakeover

TABLE = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:9"),
                   NodeInfo(1, "server", "eu", "tcp://127.0.0.1:10"),
                   NodeInfo(2, "worker", "eu", "tcp://127.0.0.1:11", 0, 0),
                   NodeInfo(3, "worker", "eu", "tcp://127.0.0.1:12", 1, 1)])
ME = TABLE[2]


def takeover(restarts=1, barriers=()):
    sent, reports = [], []
    po = types.SimpleNamespace(
        table=TABLE, send_scheduler=sent.append, reregister=reports.append,
        settings=types.SimpleNamespace(scheduler_restarts=restarts, dead_after_s=1.0,
                                       timeout_s=5.0),
        # the Postoffice's judgment (test_postoffice.py): presumed dead from 1 s on
        scheduler_verdict=lambda now: "the scheduler at tcp://127.0.0.1:9 sent nothing "
        "for 1.0s; it is presumed dead" if now >= 1.0 else "",
        judge_scheduler=lambda: None)
    t = SchedulerTakeover(po, ME, lambda: list(barriers),
                          RateLimitedLog(logging.getLogger("test")), now=0.0)
    return t, sent, reports


def test_a_silent_scheduler_makes_the_worker_re_register_every_beat_with_its_report():
    t, _, reports = takeover()
    assert t.beat(0.5) == "" and reports == []
    t.on_worker_left(1)
    assert t.beat(1.5) == "" and t.beat(2.0) == ""
    assert reports == [{"node": ME.to_json(), "finished": [1]}] * 2
    assert "no new scheduler took the cluster over" in t.beat(6.6)


def test_without_restarts_the_worker_fails_naming_the_scheduler():
    t, _, reports = takeover(restarts=0)
    assert "it is presumed dead" in t.beat(1.5) and reports == []
    assert not t.acknowledged


def test_a_new_schedulers_welcome_gets_the_waiting_barriers_and_an_unanswered_bye():
    t, sent, _ = takeover(barriers=(4,))
    t.beat(1.5)
    t._bye = {"clean": True, "reason": "", "pushes": []}
    welcome = Message(Kind.WELCOME, sender=0, meta={"nodes": TABLE.to_json(), "you": 2,
                                                    "rebuilt": True, "settings": {}})
    t.on_welcome(welcome)
    assert not t.watch.lost
    assert [(m.kind, m.seq) for m in sent] == [(Kind.BARRIER, 4), (Kind.BYE, 0)]
    t.on_welcome(welcome)                    # a duplicate: nothing sent again
    assert len(sent) == 2


def test_a_welcome_for_another_table_is_dropped():
    t, sent, _ = takeover(barriers=(4,))
    t.beat(1.5)
    t.on_welcome(Message(Kind.WELCOME, sender=0, meta={"nodes": TABLE.to_json()[:3],
                                                       "you": 2, "rebuilt": True}))
    assert t.watch.lost and sent == []


def test_the_bye_waits_for_its_acknowledgement():
    """...and a worker that said BYE reports itself finished to a new scheduler (which
    then does not await it)."""
    t, sent, reports = takeover()
    assert t.on_worker_left(1) is False and t.left_ranks == {1}
    threading.Timer(0.05, lambda: t.on_worker_left(ME.rank)).start()
    t.say_bye({"clean": True, "reason": "", "pushes": []})
    assert t.bye_acked.is_set() and [m.kind for m in sent] == [Kind.BYE]
    assert t.acknowledged and t.left_ranks == {1}
    assert t.beat(1.5) == ""
    assert reports == [{"node": ME.to_json(), "finished": [0, 1]}]
