import pytest
from netstorm.geoserver.worker.client import KVStoreError, WorkerSettings


def test_settings_from_environment():
    s = WorkerSettings.from_env({"NETSTORM_SCHEDULER": "tcp://10.0.0.1:9000",
                                 "NETSTORM_DC": "eu", "NETSTORM_LOCAL_INDEX": "3",
                                 "NETSTORM_TIMEOUT_S": "2.5", "NETSTORM_HOST": "10.0.0.2"})
    assert s == WorkerSettings("tcp://10.0.0.1:9000", "eu", "10.0.0.2", 3, 2.5)


def test_missing_settings_name_the_variables_and_the_launcher():
    with pytest.raises(KVStoreError, match="NETSTORM_SCHEDULER, NETSTORM_DC not set.*launch.py"):
        WorkerSettings.from_env({})


def test_malformed_settings_are_clear():
    with pytest.raises(KVStoreError, match="bad netstorm environment variable"):
        WorkerSettings.from_env({"NETSTORM_SCHEDULER": "tcp://x:1", "NETSTORM_DC": "eu",
                                 "NETSTORM_LOCAL_INDEX": "first"})


def test_a_message_that_upsets_dispatch_is_logged_and_the_io_thread_goes_on(caplog):
    import logging

    from netstorm.geoserver.core.nodes import NodeInfo
    from netstorm.geoserver.core.ratelog import RateLimitedLog
    from netstorm.geoserver.core.wire import Kind, Message
    from netstorm.geoserver.worker.client import WorkerClient, log

    client = WorkerClient.__new__(WorkerClient)          # no sockets: only what dispatch uses
    client.me = NodeInfo(3, "worker", "eu", "tcp://127.0.0.1:1", rank=1, local_rank=0)
    client._drops = RateLimitedLog(log)

    def upset(msg):
        raise TypeError("unexpected reply layout")
    client._dispatch = upset
    with caplog.at_level(logging.WARNING):
        client._dispatch_safely(Message(Kind.VALUE, sender=1))
    assert "worker 1: dropped VALUE from node 1: TypeError('unexpected reply layout')" \
        in caplog.text


def test_beats_queued_while_the_io_thread_was_busy_are_read_before_judging_the_scheduler(
        monkeypatch):
    """An I/O thread held up beyond dead_after_s (the GIL, or the machine under load) does
    not take the scheduler for dead: the beats that queued up meanwhile are read first.
    Socket-free: a clock the test moves."""
    import threading
    import types

    from fakes import Clock
    from netstorm.geoserver.worker import client as worker_client
    from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
    from netstorm.geoserver.core.wire import Kind, Message
    from netstorm.geoserver.core.ratelog import RateLimitedLog
    from netstorm.geoserver.worker.progress import Progress
    from netstorm.geoserver.worker.takeover import SchedulerTakeover
    clock = Clock(100.0)
    monkeypatch.setattr(worker_client, "time", types.SimpleNamespace(monotonic=clock))
    client = worker_client.WorkerClient.__new__(worker_client.WorkerClient)    # no sockets
    client.me = NodeInfo(3, "worker", "eu", "tcp://127.0.0.1:1", rank=1, local_rank=0)
    client._drops = RateLimitedLog(worker_client.log)
    client.requests = types.SimpleNamespace(expire=lambda now: None, aborted=False,
                                            waiting=lambda: (False, []))
    client.progress, client.keys = Progress(clock.t), {}
    client.link = types.SimpleNamespace(send_due=lambda now: None, end_unsent=lambda: None)
    inbox = [Message(Kind.VALUE, sender=1), Message(Kind.HEARTBEAT, sender=0)]
    client._closed, failed = threading.Event(), []

    def recv(timeout_s):
        if not inbox:
            client._closed.set()
        return inbox.pop(0) if inbox else None
    # the real Postoffice judges the scheduler (its messages pass admit), on a stub Van
    from netstorm.geoserver.config.settings import RuntimeSettings
    from netstorm.geoserver.core import postoffice
    monkeypatch.setattr(postoffice, "time", types.SimpleNamespace(monotonic=clock))
    van = types.SimpleNamespace(pending=lambda: bool(inbox), recv=recv,
                                connect=lambda *args, **kw: None, send=lambda *args: None)
    client.po = postoffice.Postoffice(van, "tcp://127.0.0.1:1", "worker", "eu")
    client.po.table = NodeTable([NodeInfo(0, "scheduler", "", "tcp://127.0.0.1:1"),
                                 NodeInfo(1, "server", "eu", "tcp://127.0.0.1:2"),
                                 client.me])
    client.po.me = client.me
    client.po.settings = RuntimeSettings(heartbeat_s=0.25, dead_after_s=2.0)
    client.po.judge_scheduler()
    client.heartbeat_s, client.outbox = 0.25, types.SimpleNamespace(messages=[])
    client._fail_all = lambda reason, caused_by_other=True: failed.append(reason)
    client.takeover = SchedulerTakeover(client.po, client.me, list, client._drops, clock.t)

    def busy(msg):
        if msg.kind != Kind.HEARTBEAT:  # a long handler of a reply; the beat is quick
            clock.t += 10.0             # 5 x dead_after_s
    client._dispatch_safely = busy
    client._io_loop()
    assert failed == [] and not inbox
