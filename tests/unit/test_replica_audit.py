"""scheduler/replica_audit.py: the DCs' replica digests compared per (key, round)."""
from netstorm.scheduler.replica_audit import KEEP_ROUNDS, ReplicaAudit, compare

A, B, X = "a" * 64, "b" * 64, "f" * 64


def rows(rnd, *held):
    """``[key, rnd, digest, updates]`` for keys 0, 1, ... holding ``held``."""
    return [[key, rnd, digest, rnd] for key, digest in enumerate(held)]


def test_replicas_that_agree_make_one_clean_record_per_round():
    audit = ReplicaAudit(["dc0", "dc1", "dc2"])
    assert audit.report("dc0", rows(10, A, B)) == []
    assert audit.report("dc1", rows(10, A, B)) == []
    assert audit.report("dc2", rows(10, A, B)) == []    # compared, but dcs may still send
    done = audit.report("dc0", rows(20, A, B)) + audit.report("dc1", rows(20, A, B)) + \
        audit.report("dc2", rows(20, A, B))
    assert [d.record() for d in done] == [{"event": "replica_audit", "round": 10, "keys": 2,
                                           "dcs": 3, "mismatches": [], "count_errors": []}]


def test_the_odd_dc_is_named_against_a_strict_majority_at_once():
    audit = ReplicaAudit(["dc0", "dc1", "dc2"])
    audit.report("dc0", rows(10, A, B))
    audit.report("dc2", rows(10, A, X))
    assert audit.report("dc1", [[0, 10, A, 10]]) == []      # key 0 agrees; key 1 waits
    (done,) = audit.report("dc1", [[1, 10, B, 10]])
    (mismatch,) = done.mismatches
    assert (mismatch.key, mismatch.round, mismatch.odd, mismatch.majority) == \
        (1, 10, ("dc2",), ("dc0", "dc1"))
    assert "key 1 after round 10 in dc2" in mismatch.describe()
    assert "majority dc0, dc1" in mismatch.describe()
    assert done.record()["mismatches"] == [{"key": 1, "odd": ["dc2"],
                                            "majority": ["dc0", "dc1"]}]


def test_two_dcs_that_differ_have_no_majority():
    mismatch = compare(3, 5, {"dc0": (A, 5), "dc1": (X, 5)})
    assert mismatch.odd == ("dc0", "dc1") and mismatch.majority == ()
    assert "between dc0" in mismatch.describe() and "no strict majority" in mismatch.describe()
    assert compare(3, 5, {"dc0": (A, 5), "dc1": (A, 5)}) is None
    tie = compare(3, 5, {"a": (A, 5), "b": (A, 5), "c": (X, 5), "d": (X, 5)})
    assert tie.majority == ()


def test_a_doubled_update_differs_even_with_identical_values():
    mismatch = compare(0, 10, {"dc0": (A, 10), "dc1": (A, 11), "dc2": (A, 10)})
    assert mismatch.odd == ("dc1",) and "11 updates" in mismatch.describe()


def test_a_count_off_its_rounds_is_an_error_even_when_every_dc_agrees():
    audit = ReplicaAudit(["dc0", "dc1"])
    for rnd, updates in ((10, 13), (20, 23), (30, 34)):     # offset 3 (resumed), then +1
        for dc in ("dc0", "dc1"):
            audit.report(dc, [[0, rnd, A, updates]])
    audit.report("dc0", [[0, 40, A, 44]])
    done = audit.report("dc1", [[0, 40, A, 44]])
    errors = [c for d in done for c in d.count_errors]
    assert [(c.dc, c.round, c.updates, c.expected) for c in errors] == \
        [("dc0", 30, 34, 33), ("dc1", 30, 34, 33)]
    assert "an update was doubled" in errors[0].describe()
    assert not any(d.mismatches for d in done)


def test_no_count_is_checked_without_a_server_optimizer():
    audit = ReplicaAudit(["dc0"])
    for rnd in (10, 20, 30):
        done = audit.report("dc0", [[0, rnd, A, -1]])
    assert not any(d.count_errors for d in done)


def test_a_dc_that_stops_reporting_leaves_rounds_compared_across_the_others():
    audit = ReplicaAudit(["dc0", "dc1", "dc2"])
    done = []
    for rnd in range(1, KEEP_ROUNDS + 3):
        done += audit.report("dc0", rows(rnd, A)) + audit.report("dc1", rows(rnd, A))
    assert [d.round for d in done] == [1, 2]
    assert done[0].record()["dcs"] == 2 and done[0].keys == 1
    assert [d.round for d in audit.finish()] == list(range(3, KEEP_ROUNDS + 3))


def test_a_dc_alone_is_not_compared_and_strangers_are_ignored():
    audit = ReplicaAudit(["dc0", "dc1"], keep_rounds=1)
    assert audit.report("zz", rows(1, A)) == []
    audit.report("dc0", rows(1, A))
    (done,) = audit.report("dc0", rows(2, A))
    assert done.keys == 0


def test_what_a_copy_replaced_is_not_compared_and_counts_start_afresh():
    audit = ReplicaAudit(["dc0", "dc1", "dc2"])
    audit.report("dc2", [[0, 10, X, 10]])                  # before the copy
    audit.forget({0: 12}, dcs=["dc2"])
    audit.report("dc2", [[0, 10, X, 10], [0, 12, X, 12]])  # sent late: ignored
    audit.report("dc0", [[0, 10, A, 10]])                  # every DC's: not compared
    assert audit.finish() == []
    for dc in ("dc0", "dc1", "dc2"):
        done = audit.report(dc, [[0, 20, A, 20]])
    assert done == [] and audit.finish()[0].mismatches == []


def test_an_optimizer_set_again_starts_a_new_count_baseline():
    """set_optimizer with a new spec rebuilds the servers' optimizer, whose counts start at
    0: a count that went down is no error; one that then drifts again is."""
    audit = ReplicaAudit(["dc0"])
    done = []
    for rnd, updates in ((10, 10), (20, 20), (30, 7), (40, 17), (50, 28)):
        done += audit.report("dc0", [[0, rnd, A, updates]])
    done += audit.finish()
    errors = [(c.round, c.updates, c.expected) for d in done for c in d.count_errors]
    assert errors == [(50, 28, 27)]


def test_digests_beyond_the_cap_are_dropped_and_counted():
    """A server naming keys no other DC has cannot grow the scheduler without bound."""
    audit = ReplicaAudit(["dc0", "dc1"], max_waiting=4)
    audit.report("dc0", [[key, 10, A, 10] for key in range(6)])
    assert audit.waiting == 4 and audit.dropped == 2
    audit.report("dc1", [[key, 10, A, 10] for key in range(5)])    # 4 compared, 1 not
    assert audit.waiting == 0 and audit.dropped == 3                # held
    audit.report("dc0", [[9, 20, A, 20]])
    assert audit.waiting == 1 and audit.finish()[0].round == 10
    assert audit.waiting == 0
