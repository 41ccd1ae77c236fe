"""Stalls (scheduler/stalls.py): who has not pushed a round a worker waits for, and which
worker stalls: silent on the data path, not waiting itself, while others wait on it or have
finished. Pure: the clock is the test's."""
from netstorm.geoserver.core.nodes import NodeInfo
from netstorm.scheduler.stalls import MAX_NAMED, STALL_ROUNDS, Stall, StallWatch

WORKERS = [NodeInfo(3, "worker", "dc0", "tcp://a:2", rank=0, local_rank=0),
           NodeInfo(4, "worker", "dc1", "tcp://b:2", rank=1, local_rank=0),
           NodeInfo(5, "worker", "dc2", "tcp://c:2", rank=2, local_rank=0)]


def _watch(floor_s=5.0, max_idle_s=0.0):
    return StallWatch(WORKERS, floor_s, max_idle_s)


def test_a_round_lacks_the_workers_that_have_not_pushed_it():
    watch = _watch()
    watch.heard(3, {"quiet_s": 0.0, "pushed": [[1, [0, 1]]], "waits": [[0, 1, 2.0]]}, 10.0)
    watch.heard(4, {"quiet_s": 3.0}, 10.0)                # it never pushed anything
    watch.heard(5, {"quiet_s": 0.0, "pushed": [[1, [0]], [2, [1]]],
                    "waits": [[1, 2, 0.5], [-1, 0, 0.1]]}, 10.0)
    assert watch.missing((0, 1), asking=3, finished=set()) == [4]
    assert watch.missing((1, 2), asking=5, finished=set()) == [3, 4]
    assert watch.missing((0, 1), asking=3, finished={4}) == []     # it finished: WORKER_LEFT
    assert watch.missing((None, 0), asking=5, finished=set()) == [3, 4]   # not at the barrier
    assert watch.verdicts(set()) == {      # only to those waiting
        3: {"missing": [[0, 1, ["dc1/0 (rank 1)"]]]},
        5: {"missing": [[1, 2, ["dc0/0 (rank 0)", "dc1/0 (rank 1)"]],
                        [-1, 0, ["dc0/0 (rank 0)", "dc1/0 (rank 1)"]]]}}
    assert watch.verdicts({3}) == {5: {"missing": [[1, 2, ["dc1/0 (rank 1)"]],
                                                   [-1, 0, ["dc1/0 (rank 1)"]]]}}


def test_a_verdict_names_a_few_workers_and_counts_the_rest():
    workers = [NodeInfo(10 + i, "worker", "dc0", "tcp://a:2", rank=i, local_rank=i)
               for i in range(MAX_NAMED + 6)]
    watch = StallWatch(workers, 5.0)
    watch.heard(10, {"quiet_s": 0.0, "pushed": [[1, [0]]], "waits": [[0, 1, 1.0]]}, 0.0)
    named = watch.verdicts(set())[10]["missing"][0][2]
    assert len(named) == MAX_NAMED + 1 and named[0] == "dc0/1 (rank 1)" and \
        named[-1] == "5 more workers"


def test_push_counts_are_kept_until_a_beat_reports_new_ones():
    watch = _watch()
    watch.heard(4, {"quiet_s": 0.0, "pushed": [[3, [0, 1]]]}, 1.0)
    watch.heard(4, {"quiet_s": 0.5}, 2.0)                 # unchanged: not repeated
    assert watch.missing((0, 3), asking=5, finished=set()) == [3]    # 4 pushed it
    watch.heard(4, {"quiet_s": 0.0, "pushed": [[4, [0]], [3, [1]]]}, 3.0)
    assert 4 not in watch.missing((0, 4), 3, set()) and 4 in watch.missing((1, 4), 3, set())


def test_a_silent_worker_others_wait_on_stalls_named_with_them():
    watch = _watch(floor_s=5.0)
    watch.heard(3, {"quiet_s": 0.0, "pushed": [[7, [0]]], "waits": [[0, 7, 30.0]]}, 100.0)
    watch.heard(5, {"quiet_s": 0.0, "pushed": [[7, [0]]], "waits": [[0, 7, 30.0]]}, 100.0)
    watch.heard(4, {"quiet_s": 38.0, "pushed": [[6, [0]]]}, 100.0)
    assert watch.stalls(100.0, set()) == [Stall(4, 1, "dc1/0", 38.0, (0, 2))]
    stall, = watch.stalls(102.0, set())         # its silence grows between its beats
    assert stall.describe() == "stall: rank 1 (dc1/0) sent nothing for 40 s; ranks 0, 2 wait " \
                               "on it"


def test_no_stall_without_a_victim_below_the_threshold_or_for_a_waiting_worker():
    watch = _watch(floor_s=5.0)
    watch.heard(3, {"quiet_s": 60.0, "pushed": [[7, [0]]]}, 100.0)   # computing, say
    watch.heard(4, {"quiet_s": 60.0, "pushed": [[7, [0]]]}, 100.0)
    watch.heard(5, {"quiet_s": 0.0, "pushed": [[7, [0]]], "waits": [[0, 7, 1.0]]}, 100.0)
    assert watch.stalls(100.0, set()) == []     # both pushed the round rank 2 waits for
    watch.heard(5, {"quiet_s": 0.0, "pushed": [[8, [0]]], "waits": [[0, 8, 1.0]]}, 100.0)
    watch.heard(3, {"quiet_s": 4.0, "pushed": [[7, [0]]]}, 100.0)
    assert [s.rank for s in watch.stalls(100.0, set())] == [1]   # rank 0: not for 5 s yet
    assert [s.rank for s in watch.stalls(101.5, set())] == [0, 1]     # never rank 2: it waits


def test_workers_that_finished_are_named_as_waiting_no_more():
    watch = _watch(floor_s=5.0)
    watch.heard(3, {"quiet_s": 0.0, "pushed": [[9, [0]]]}, 0.0)
    watch.heard(5, {"quiet_s": 0.0, "pushed": [[9, [0]]]}, 0.0)
    watch.heard(4, {"quiet_s": 6.0, "pushed": [[9, [0]]]}, 0.0)
    stall, = watch.stalls(0.0, finished={3, 5})
    assert stall.describe() == "stall: rank 1 (dc1/0) sent nothing for 6 s; ranks 0, 2 finished"
    assert watch.stalls(0.0, finished={3, 4, 5}) == []


def test_the_threshold_is_rounds_long_at_least_the_floor_at_most_half_max_idle():
    watch = _watch(floor_s=5.0)
    assert watch.threshold_s() == 5.0                       # no round measured yet
    for node, round_s in ((3, 0.1), (4, 2.0), (5, 1.0)):
        watch.heard(node, {"quiet_s": 0.0, "round_s": round_s}, 0.0)
    assert watch.threshold_s() == STALL_ROUNDS * 1.0        # the median round
    watch.heard(4, {"quiet_s": 0.0, "round_s": 0.2}, 0.0)
    assert watch.threshold_s() == 5.0
    assert _watch(floor_s=5.0, max_idle_s=4.0).threshold_s() == 2.0


def test_a_node_that_is_no_worker_is_ignored():
    watch = _watch()
    watch.heard(1, {"quiet_s": 100.0}, 0.0)
    assert watch.reports == {}
