"""The worker's pending requests (geoserver/worker/requests.py): how each fails when a
worker left, the run aborted, or nothing came in time."""
import time

from netstorm.geoserver.worker.pending import Pending
from netstorm.geoserver.worker.requests import Requests


def _book(esync=False):
    """The pending requests of worker rank 0 (what the client held before)."""
    return Requests(0, 30.0, esync)


def test_under_esync_a_worker_that_left_dooms_only_barriers():
    """esync: its DC's server goes on without it (a fast worker finishes its steps in fewer
    rounds), so only a barrier, which needs every worker, can never come."""
    book = _book(esync=True)
    book.worker_left("worker rank 1 (dc1/0, node 4)", {5: 50})
    assert not book.left_error((5, 51), "x") and not book.left_error((6, 3), "x")
    assert "can never come" in book.left_error((None, 0), "barrier 2")


def test_a_worker_that_left_dooms_only_the_rounds_it_never_pushed():
    book = _book()
    waiting = {"last": Pending("value of key 5 round 50", (5, 50)),
               "next": Pending("value of key 5 round 51", (5, 51)),
               "other key": Pending("value of key 6 round 3", (6, 3)),
               "barrier": Pending("barrier 2", (None, 0)), "init": Pending("init", None)}
    book.pending = dict(waiting)
    # it pushed key 5 fifty times, key 6 never (nobody's round of key 6 can complete), and
    # a key nobody pushes (a frozen parameter) does not appear at all
    book.worker_left("worker rank 1 (dc1/0, node 4)", {5: 50})
    assert set(book.pending) == {"last", "init"}
    for name in ("next", "other key", "barrier"):
        assert waiting[name].event.is_set() and waiting[name].reply is None
    assert waiting["next"].error == (
        "worker rank 0: worker rank 1 (dc1/0, node 4) finished after round 50 of key 5, so "
        "value of key 5 round 51 can never come (every round and barrier needs every worker)")
    assert "worker rank 1 (dc1/0, node 4) finished, so barrier 2" in waiting["barrier"].error
    assert not book.left_error((5, 50), "x") and book.left_error((5, 51), "x") \
        and not book.left_error(None, "x")
    assert book.caused_by_other          # the launcher looks for the worker that left


def test_a_function_waiting_for_a_request_runs_when_it_fails_or_is_overdue():
    """The kvstore's asynchronous operations hold no thread: a function waits for the
    request instead, and is called when a worker that left dooms it, when the run aborts,
    or, unanswered after timeout_s, with the same error a waiting thread would raise."""
    book = _book()
    book.timeout_s = 30.0
    ended = []
    doomed, late, aborted, answered = (Pending(f"value of key 5 round {r}", (5, r))
                                       for r in (51, 50, 49, 48))
    book.pending = {1: doomed, 2: late, 3: aborted, 4: answered}
    for p in (doomed, late, aborted, answered):
        book.when_answered(p, lambda p=p: ended.append((p.what, p.reply, p.error)))
        book.timeout_s = 300.0 if p is late else book.timeout_s   # the later ones wait longer
    book.timeout_s = 30.0
    book.worker_left("worker rank 1 (dc1/0, node 4)", {5: 50})
    assert ended == [("value of key 5 round 51", None, doomed.error)] and "can never" in \
        doomed.error
    book.expire(time.monotonic() + 10)            # not overdue yet
    assert len(ended) == 1
    book.expire(time.monotonic() + 31)
    assert ended[1][0] == "value of key 5 round 50" and ended[1][2] == (
        "worker rank 0: waited 30s for value of key 5 round 50; no answer (timeout_s in the "
        "cluster file)")
    assert set(book.pending) == {3, 4}
    book.pending.pop(4).end(reply="VALUE")
    book.fail_all("the scheduler aborted the run")
    assert [e[0] for e in ended[2:]] == ["value of key 5 round 48", "value of key 5 round 49"]
    assert ended[2][1] == "VALUE" and ended[3][1] is None and book.pending == {}


def test_a_timeout_names_the_workers_its_round_lacks_by_the_scheduler_s_word():
    """The scheduler tells a waiting worker who has not pushed its rounds (a heartbeat's
    ``missing``, scheduler/stalls.py); a request that times out names them."""
    book = _book()
    book.note_missing([[5, 50, ["dc1/0 (rank 1)"]], [-1, 0, []]])
    late = Pending("value of key 5 after round 50 from server of dc0 (node 1)", (5, 50))
    other = Pending("value of key 6 after round 50 from server of dc0 (node 1)", (6, 50))
    book.pending = {1: late, 2: other}
    assert book.waiting() == (True, [(late.since, (5, 50)), (other.since, (6, 50))])
    for pending in (late, other):
        book.when_answered(pending, lambda: None)
    book.expire(time.monotonic() + 31)
    assert late.error == (
        "worker rank 0: waited 30s for value of key 5 after round 50 from server of dc0 "
        "(node 1); no answer (timeout_s in the cluster file); round 50 of key 5 lacks the "
        "push of dc1/0 (rank 1)")
    assert other.error.endswith("no answer (timeout_s in the cluster file)")  # no word of it
    assert book.waiting() == (False, [])
