import re

import numpy as np
import pytest

from netstorm.geoserver.worker_client import KVStoreError, WorkerSettings


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

    from netstorm.geoserver.nodes import NodeInfo
    from netstorm.geoserver.ratelog import RateLimitedLog
    from netstorm.geoserver.wire import Kind, Message
    from netstorm.geoserver.worker_client import WorkerClient, log

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


def _bare_client(sync=None):
    """A WorkerClient without sockets: only the request book-keeping."""
    import threading

    from netstorm.geoserver.nodes import NodeInfo
    from netstorm.geoserver.worker_client import WorkerClient

    client = WorkerClient.__new__(WorkerClient)
    client.me = NodeInfo(3, "worker", "eu", "tcp://127.0.0.1:1", rank=0, local_rank=0)
    client._lock, client._pending, client._departed = threading.Lock(), {}, []
    client._aborted, client.caused_by_other = None, False
    from netstorm.geoserver.sync import SyncConfig
    client.sync = sync or SyncConfig()
    return client


def test_under_esync_a_worker_that_left_dooms_only_barriers():
    """esync: its DC's server goes on without it (a fast worker finishes its steps in fewer
    rounds), so only a barrier, which needs every worker, can never come."""
    from netstorm.geoserver.sync import SyncConfig
    client = _bare_client(SyncConfig(mode="esync"))
    client._worker_left("worker rank 1 (dc1/0, node 4)", {5: 50})
    assert not client._left_error((5, 51), "x") and not client._left_error((6, 3), "x")
    assert "can never come" in client._left_error((None, 0), "barrier 2")


def test_a_worker_that_left_dooms_only_the_rounds_it_never_pushed():
    from netstorm.geoserver.pending import Pending as _Pending
    client = _bare_client()
    waiting = {"last": _Pending("value of key 5 round 50", (5, 50)),
               "next": _Pending("value of key 5 round 51", (5, 51)),
               "other key": _Pending("value of key 6 round 3", (6, 3)),
               "barrier": _Pending("barrier 2", (None, 0)), "init": _Pending("init", None)}
    client._pending = dict(waiting)
    # it pushed key 5 fifty times, key 6 never (nobody's round of key 6 can complete), and
    # a key nobody pushes (a frozen parameter) does not appear at all
    client._worker_left("worker rank 1 (dc1/0, node 4)", {5: 50})
    assert set(client._pending) == {"last", "init"}
    for name in ("next", "other key", "barrier"):
        assert waiting[name].event.is_set() and waiting[name].reply is None
    assert waiting["next"].error == (
        "worker rank 0: worker rank 1 (dc1/0, node 4) finished after round 50 of key 5, so "
        "value of key 5 round 51 can never come (every round and barrier needs every worker)")
    assert "worker rank 1 (dc1/0, node 4) finished, so barrier 2" in waiting["barrier"].error
    assert not client._left_error((5, 50), "x") and client._left_error((5, 51), "x") \
        and not client._left_error(None, "x")
    assert client.caused_by_other          # the launcher looks for the worker that left


def test_a_function_waiting_for_a_request_runs_when_it_fails_or_is_overdue():
    """The kvstore's asynchronous operations hold no thread: a function waits for the
    request instead, and is called when a worker that left dooms it, when the run aborts,
    or, unanswered after timeout_s, with the same error a waiting thread would raise."""
    import time

    from netstorm.geoserver.pending import Pending
    import threading
    client = _bare_client()
    client.timeout_s = 30.0
    client._steps_known = threading.Condition(client._lock)
    ended = []
    doomed, late, aborted, answered = (Pending(f"value of key 5 round {r}", (5, r))
                                       for r in (51, 50, 49, 48))
    client._pending = {1: doomed, 2: late, 3: aborted, 4: answered}
    for p in (doomed, late, aborted, answered):
        client.when_answered(p, lambda p=p: ended.append((p.what, p.reply, p.error)))
        client.timeout_s = 300.0 if p is late else client.timeout_s   # the later ones wait longer
    client.timeout_s = 30.0
    client._worker_left("worker rank 1 (dc1/0, node 4)", {5: 50})
    assert ended == [("value of key 5 round 51", None, doomed.error)] and "can never" in \
        doomed.error
    client._expire(time.monotonic() + 10)            # not overdue yet
    assert len(ended) == 1
    client._expire(time.monotonic() + 31)
    assert ended[1][0] == "value of key 5 round 50" and ended[1][2] == (
        "worker rank 0: waited 30s for value of key 5 round 50; no answer (timeout_s in the "
        "cluster file)")
    assert set(client._pending) == {3, 4}
    client._pending.pop(4).end(reply="VALUE")
    client._fail_all("the scheduler aborted the run")
    assert [e[0] for e in ended[2:]] == ["value of key 5 round 48", "value of key 5 round 49"]
    assert ended[2][1] == "VALUE" and ended[3][1] is None and client._pending == {}


def test_small_requests_travel_in_batches_and_every_sum_stays_exact(no_leftovers):
    """2 DCs x 2 workers, 96 small keys and a large one (tests/workers/fused_worker.py):
    each worker's small requests went in BATCHes, several per BATCH, and its DC server's
    replies too."""
    import re

    from conftest import launch, worker_cmd
    run = launch(["--dcs", 2, "--workers-per-dc", 2], worker_cmd("fused_worker.py"),
                 no_leftovers)
    assert run.code == 0, run.output[-5000:]
    for rank in range(4):
        assert f"worker {rank} all checks passed" in run.output, run.output[-5000:]
        fused, batches = map(int, re.search(rf"worker {rank}: (\d+) requests in (\d+) "
                                            rf"batches", run.output).groups())
        assert batches > 0 and fused >= 2 * batches, run.output[-3000:]
    assert len(re.findall(r"'fused': [1-9]", run.output)) == 2, run.output[-3000:]


def test_requests_the_outbox_could_not_send_fail_naming_the_cause_and_the_rest_goes_on():
    """Small requests wait in the outbox (batch.py) and go from the I/O thread; a send
    that fails there fails those requests with the reason instead of ending the thread."""
    import time

    from netstorm.geoserver.batch import Outbox
    from netstorm.geoserver.nodes import NodeInfo
    from netstorm.geoserver.pending import Pending
    from netstorm.geoserver.wire import Kind, Message

    class Broken:
        def send(self, node, msg):
            raise OSError("socket closed")

    class Wake:
        woken = 0

        def wake(self):
            self.woken += 1

    client = _bare_client()
    client.server = NodeInfo(1, "server", "eu", "tcp://127.0.0.1:2")
    client.po, client.van, client.outbox, client._unsent = Broken(), Wake(), Outbox(0.0), []
    waiting = {r: Pending(f"value of key {r}") for r in (7, 8)}
    ended = []
    for request, pending in waiting.items():
        client._pending[request] = pending
        pending.then(lambda p=pending: ended.append(p.error), time.monotonic() + 60)
        client.outbox.add(Message(Kind.PULL, key=request, request=request), time.monotonic())
    client._send_due(time.monotonic())          # as the I/O thread does
    assert client.van.woken == 1 and ended == [] and client._pending == {}
    while client._unsent:                       # the I/O loop, outside the lock
        pending, error = client._unsent.pop()
        pending.end(error=error)
    assert sorted(ended) == [f"worker rank 0: could not send value of key {r}: "
                             f"OSError('socket closed')" for r in (7, 8)]


def test_a_key_of_a_dtype_the_wire_cannot_carry_is_refused_when_declared():
    from netstorm.geoserver.worker_client import KVStoreError, WorkerClient
    client = WorkerClient.__new__(WorkerClient)
    client.keys = {}
    with pytest.raises(KVStoreError, match="key 3: unsupported dtype"):
        client.declare(3, (2,), np.complex64)


@pytest.mark.parametrize("fuse_bytes,key_bytes,sent_at_once", [
    (0, 16, True),              # fusion off: every request goes at once
    (64, 256, True),            # a key as large as fuse_bytes or more: at once
    (64, 16, False),            # a small key: it waits in the outbox
])
def test_which_requests_wait_in_the_outbox(fuse_bytes, key_bytes, sent_at_once):
    from netstorm.geoserver.batch import Outbox
    from netstorm.geoserver.nodes import NodeInfo
    from netstorm.geoserver.wire import Kind, Message
    from netstorm.geoserver.worker_client import KeyInfo

    class Sent:
        def __init__(self):
            self.messages, self.woken = [], 0

        def send(self, node, msg):
            self.messages.append(msg)

        def wake(self):
            self.woken += 1

    client = _bare_client()
    client.server = NodeInfo(1, "server", "eu", "tcp://127.0.0.1:2")
    client.po = client.van = Sent()
    client.outbox, client._fuse_bytes, client._moving = Outbox(0.0), fuse_bytes, None
    client.keys = {5: KeyInfo(5, (key_bytes // 4,), np.dtype(np.float32))}
    push = Message(Kind.PUSH, key=5, seq=1, dtype=np.float32,
                   frames=[np.zeros(key_bytes // 4, np.float32)])
    client._post(push)
    assert (client.po.messages == [push]) == sent_at_once
    assert client.po.woken == (0 if sent_at_once else 1)
    init = Message(Kind.INIT, key=6, meta={"shape": [1], "dtype": "<f4"})
    client._post(init)                  # anything else goes at once, after what waited
    assert client.po.messages == [push, init] and not client.outbox.messages


@pytest.mark.parametrize("key_folder, cause", [
    ("gone", "the secret key folder .*gone does not exist"),
    ("theirs", "the scheduler at tcp://.* refused the handshake")])
def test_a_worker_that_cannot_join_leaves_one_line_for_the_launcher(tmp_path, key_folder,
                                                                     cause):
    """A missing secret key folder, or a handshake the scheduler refuses (keys of another
    cluster): a KVStoreError naming the cause, also in the reason file the launcher prints."""
    from netstorm.geoserver.cli import read_reason
    from netstorm.geoserver.security import credentials_for, generate_cluster_keys
    from netstorm.geoserver.van import Van
    from netstorm.geoserver.worker_client import WorkerClient
    ours = generate_cluster_keys(["eu"], tmp_path / "ours")
    theirs = generate_cluster_keys(["eu"], tmp_path / "theirs")
    why = tmp_path / "why"
    sched = Van("sched", "127.0.0.1", 0, credentials=credentials_for(ours, ""))
    try:
        settings = WorkerSettings(sched.address, "eu", timeout_s=5, reason_file=str(why),
                                  key_file=str(tmp_path / key_folder / "dc-eu.key_secret"),
                                  scheduler_key=theirs.keys[""], run_dir=str(tmp_path))
        with pytest.raises(KVStoreError, match=cause):
            WorkerClient(settings)
    finally:
        sched.close()
    reason, caused_by_other = read_reason(str(why))
    assert re.match(f"KVStoreError: .*{cause}", reason) and not caused_by_other
    assert "\n" not in reason
