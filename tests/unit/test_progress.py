"""A worker's data path on its heartbeats (geoserver/worker/progress.py), and what a request
that times out says of the round it waited for."""
import types

from netstorm.geoserver.core.schema import MAX_WAITS
from netstorm.geoserver.core.wire import Kind
from netstorm.geoserver.worker.progress import Progress, lacking, missing_from


def _keys(**pushes):
    return {int(k[1:]): types.SimpleNamespace(pushes=n) for k, n in pushes.items()}


def test_a_beat_says_how_long_it_was_silent_and_its_pushes_when_they_changed():
    progress = Progress(10.0)
    assert progress.beat_meta({}, False, [], 12.5) == {"quiet_s": 2.5, "pushed": []}
    progress.sent(Kind.PUSH, 1, 13.0)
    meta = progress.beat_meta(_keys(k0=1, k1=1, k2=0), False, [], 14.0)
    assert meta == {"quiet_s": 1.0, "pushed": [[1, [0, 1]]]}
    assert progress.beat_meta(_keys(k0=1, k1=1), False, [], 15.0) == {"quiet_s": 2.0}
    assert progress.beat_meta(_keys(k0=2, k1=1), True, [], 16.0) == \
        {"quiet_s": 0.0, "pushed": [[1, [1]], [2, [0]]]}       # waiting: not silent


def test_a_beat_names_the_oldest_rounds_waited_for_each_once():
    progress = Progress(0.0)
    needing = [(1.0, (5, 3)), (1.5, (5, 3)), (2.0, (None, 0))] + \
        [(3.0 + i, (i, 4)) for i in range(20)]
    meta = progress.beat_meta({}, True, needing, 11.0)
    assert meta["waits"][:3] == [[5, 3, 10.0], [-1, 0, 9.0], [0, 4, 8.0]]
    assert len(meta["waits"]) == MAX_WAITS


def test_the_median_round_is_measured_from_the_first_push_of_each_new_round():
    progress = Progress(0.0)
    assert progress.round_s() is None
    for rnd, at in ((1, 1.0), (1, 1.2), (2, 2.0), (2, 2.5), (3, 4.0), (5, 5.0)):
        progress.sent(Kind.PUSH, rnd, at)
    progress.sent(Kind.PULL, 9, 9.0)        # a pull's round starts no round
    assert sorted(progress._round_s) == [0.5, 1.0, 2.0] and progress.round_s() == 1.0
    assert progress.beat_meta({}, False, [], 10.0)["round_s"] == 1.0


def test_a_timeout_names_what_its_round_lacks_by_the_scheduler_s_word():
    missing = missing_from([[0, 1, ["dc1/0 (rank 1)"]], [2, 5, ["dc0/1 (rank 1)",
                                                              "dc1/0 (rank 2)"]],
                            [3, 5, []], [-1, 0, ["dc2/0 (rank 4)"]]])
    assert lacking(missing, (0, 1)) == "round 1 of key 0 lacks the push of dc1/0 (rank 1)"
    assert lacking(missing, (2, 5)) == \
        "round 5 of key 2 lacks the pushes of dc0/1 (rank 1), dc1/0 (rank 2)"
    assert lacking(missing, (3, 5)).startswith("every worker has pushed round 5 of key 3")
    assert lacking(missing, (None, 0)) == "the barrier waits for dc2/0 (rank 4)"
    assert lacking(missing, (0, 2)) == "" and lacking(missing, None) == ""
