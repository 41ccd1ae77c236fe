"""netstorm.geoserver.worker.pending: a request ends once, waking a waiting thread or its function."""
import threading

from netstorm.geoserver.worker.pending import Pending


def test_a_function_waiting_for_a_request_runs_once_when_it_is_answered():
    pending, ran = Pending("value of key 1"), []
    pending.then(lambda: ran.append(pending.reply), deadline=10.0)
    assert ran == [] and not pending.overdue(5.0) and pending.overdue(11.0)
    pending.end(reply="VALUE")
    pending.end(reply="again")           # a second end wakes nobody again
    assert ran == ["VALUE"] and not pending.overdue(11.0)
    assert pending.wait(0) and pending.reply == "again"


def test_a_function_given_after_the_end_runs_at_once():
    pending, ran = Pending("x"), []
    pending.end(error="worker rank 1 finished")
    pending.then(lambda: ran.append(pending.error), deadline=0.0)
    assert ran == ["worker rank 1 finished"] and pending.reply is None


def test_a_waiting_thread_is_woken_and_a_request_without_end_times_out():
    pending = Pending("x")
    assert not pending.wait(0.01)
    threading.Timer(0.02, pending.end, kwargs={"reply": "VALUE"}).start()
    assert pending.wait(5) and pending.reply == "VALUE"


def test_ends_racing_with_the_function_being_given_run_it_exactly_once():
    for _ in range(200):
        pending, ran = Pending("x"), []
        ender = threading.Thread(target=pending.end, kwargs={"reply": 1})
        ender.start()
        pending.then(lambda: ran.append(1), deadline=1e9)
        ender.join()
        assert ran == [1]
