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
