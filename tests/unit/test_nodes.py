"""netstorm.geoserver.core.nodes: when a silent node is presumed dead."""
from netstorm.geoserver.core.nodes import SilenceJudge


def test_a_silent_node_is_dead_past_dead_after_s_unless_a_message_waits_to_be_read():
    judge = SilenceJudge(2.0)
    assert not judge.dead("a", 2.0, now=10.0, waiting=False)
    assert judge.dead("a", 2.5, now=10.0, waiting=False)
    assert not judge.dead("a", 10.0, now=10.0, waiting=True)     # maybe its queued beat


def test_a_flood_of_messages_defers_the_judgment_by_dead_after_s_at_most():
    judge = SilenceJudge(2.0)
    assert not judge.dead("a", 3.0, now=10.0, waiting=True)
    assert not judge.dead("a", 4.9, now=11.9, waiting=True)
    assert judge.dead("a", 5.1, now=12.1, waiting=True)          # deferred 2.1 s: enough


def test_a_node_heard_again_starts_a_new_deferral_and_nodes_are_judged_apart():
    judge = SilenceJudge(2.0)
    assert not judge.dead("a", 3.0, now=10.0, waiting=True)
    assert not judge.dead("b", 0.1, now=13.0, waiting=True)      # b: not silent
    assert not judge.dead("a", 0.0, now=13.0, waiting=True)      # a's beat was read
    assert not judge.dead("a", 3.0, now=20.0, waiting=True)      # a new deferral
    assert judge.dead("a", 5.5, now=22.5, waiting=True)


def test_a_silent_node_is_suspected_once_per_silence_past_its_learnt_deadline():
    from netstorm.geoserver.core.nodes import SilenceJudge
    judge = SilenceJudge(10.0, 0.5, 1.0)
    for t in range(20):                         # heard regularly: learnt deadline 1 s
        judge.heard(7, 100.0 + 0.5 * t)
    seen = 109.5
    assert not judge.suspect(7, seen, seen + 0.9, 10.0)     # within its deadline
    assert judge.suspect(7, seen, seen + 1.1, 10.0)         # past it: said once
    assert not judge.suspect(7, seen, seen + 2.0, 10.0)
    assert not judge.suspect(7, seen + 3, seen + 3.5, 10.0)  # it spoke: a new silence...
    assert judge.suspect(7, seen + 3, seen + 4.5, 10.0)     # ...suspected anew
    assert not judge.suspect(7, seen + 6, seen + 8.0, judge.deadline(7))  # judged at once
