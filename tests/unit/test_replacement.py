"""scheduler/replacement.py: the plan that replaces a lost DC server from peer replicas."""
import pytest

from netstorm.scheduler.replacement import RecoveryError, ServerReplacement

D1, D2, D3 = "1" * 64, "2" * 64, "3" * 64


def test_each_key_restarts_from_the_most_any_survivor_applied_by_those_that_did():
    rep = ServerReplacement("b", ["a", "c", "d"], deadline=50.0)
    rep.report("a", [[0, 7, D1], [1, 6, D2], [2, 6, D3]])
    assert not rep.reported
    rep.report("c", [[0, 7, D1], [1, 5, "x" * 64], [2, 6, D3]])
    rep.report("z", [[0, 99, D1]])                      # not a survivor: ignored
    rep.report("d", [[0, 7, D1], [1, 6, D2], [2, 6, D3]])
    assert rep.reported
    plan = rep.make_plan()
    assert plan[0] == (7, ("a", "c", "d"), D1) and plan[2] == (6, ("a", "c", "d"), D3)
    assert plan[1] == (6, ("a", "d"), D2)               # not c: it is behind
    assert rep.start_round == 7                         # the earliest round replayed
    assert not rep.back("a") and not rep.back("c") and not rep.back("d")
    assert rep.back("b")                                # every server, the new one too


def test_replicas_that_differ_at_the_same_round_are_not_copied():
    rep = ServerReplacement("b", ["a", "c"], deadline=50.0)
    rep.report("a", [[0, 7, D1]])
    rep.report("c", [[0, 7, D2]])
    with pytest.raises(RecoveryError, match="replicas of key 0 after round 7 differ between "
                                            "a, c"):
        rep.make_plan()


def test_a_key_some_survivor_does_not_know_is_refused():
    rep = ServerReplacement("b", ["a", "c"], deadline=50.0)
    rep.report("a", [[0, 7, D1], [1, 3, D2]])
    rep.report("c", [[0, 7, D1]])
    with pytest.raises(RecoveryError, match="key 1 is unknown to the servers of c"):
        rep.make_plan()


def test_overdue_names_who_did_not_report_then_who_did_not_recover():
    rep = ServerReplacement("b", ["a", "c"], deadline=50.0)
    rep.report("a", [[0, 1, D1]])
    assert rep.overdue(50.0) == ""
    assert rep.overdue(51.0) == "no state report from the servers of c"
    rep.report("c", [[0, 1, D1]])
    rep.make_plan()
    rep.back("a")
    assert rep.overdue(51.0) == "the servers of b, c did not recover"



def test_a_repair_has_the_odd_replica_copy_every_key_from_the_majority():
    """A replica audit's repair (docs/recovery-audit.md): c's replica differs; it holds no
    key, even at the majority's round, and every key's digest is the majority's."""
    rep = ServerReplacement("c", ["a", "b", "c"], deadline=50.0, odd=["c"])
    rep.report("a", [[0, 7, D1], [1, 6, D2]])
    rep.report("b", [[0, 6, D3], [1, 6, D2]])
    rep.report("c", [[0, 7, "x" * 64], [1, 5, "y" * 64]])
    plan = rep.make_plan()
    assert plan == {0: (7, ("a",), D1), 1: (6, ("a", "b"), D2)}
    assert not rep.back("a") and not rep.back("b") and rep.back("c")


def test_a_repair_puts_an_odd_replica_a_round_ahead_back_but_no_further():
    """One round ahead, the odd DC sums that round again (its server kept its workers'
    sum); two rounds cannot happen in fsa and are refused."""
    rep = ServerReplacement("c", ["a", "b", "c"], deadline=50.0, odd=["c"])
    rep.report("a", [[0, 6, D1]])
    rep.report("b", [[0, 6, D1]])
    rep.report("c", [[0, 7, D2]])
    assert rep.make_plan() == {0: (6, ("a", "b"), D1)}
    rep = ServerReplacement("c", ["a", "b", "c"], deadline=50.0, odd=["c"])
    rep.report("a", [[0, 6, D1]])
    rep.report("b", [[0, 6, D1]])
    rep.report("c", [[0, 8, D2]])
    with pytest.raises(RecoveryError, match="odd replica of key 0 in c is more than a round "
                                            "ahead of every other DC"):
        rep.make_plan()
