"""scheduler/auditing.py: what the scheduler does with what the replica audit finds."""
import pytest

from netstorm.scheduler.auditing import ReplicaAuditing
from netstorm.scheduler.liveness import ClusterAborted
from netstorm.scheduler.replacement import ServerReplacement

A, X = "a" * 64, "f" * 64
DCS = ("dc0", "dc1", "dc2")


class FakeReplacing:
    def __init__(self):
        self.current, self.repairs = None, []

    def repair(self, odd, why):
        self.repairs.append((sorted(odd), why))


def auditing(repair, dcs=DCS):
    records, replacing = [], FakeReplacing()
    return ReplicaAuditing(dcs, records.append, replacing, int(repair)), records, replacing


def report(audit, rnd, held):
    for dc, (digest, updates) in held.items():
        audit.on_heartbeat(dc, [[0, rnd, digest, updates]])


def test_without_recovery_a_mismatch_stops_the_run_naming_the_dcs_key_and_round():
    audit, records, replacing = auditing(repair=False)
    with pytest.raises(ClusterAborted, match=r"replica audit: the replica of key 0 after "
                                             r"round 10 in dc2 .* differs from the majority "
                                             r"dc0, dc1 .*\(with \[recovery\] "
                                             r"server_restarts the odd replica would be "
                                             r"replaced from the majority's\)$"):
        report(audit, 10, {"dc0": (A, 10), "dc1": (A, 10), "dc2": (X, 10)})
    assert records[-1]["event"] == "replica_audit" and records[-1]["round"] == 10
    assert records[-1]["mismatches"] == [{"key": 0, "odd": ["dc2"],
                                          "majority": ["dc0", "dc1"]}]
    assert audit.mismatches == 1 and not replacing.repairs


def test_with_recovery_the_odd_replica_is_repaired_and_the_run_goes_on():
    audit, records, replacing = auditing(repair=True)
    report(audit, 10, {"dc0": (A, 10), "dc1": (A, 10), "dc2": (X, 10)})
    assert replacing.repairs and replacing.repairs[0][0] == ["dc2"]
    assert "key 0 after round 10 in dc2" in replacing.repairs[0][1]
    assert audit.repairs == 1
    with pytest.raises(ClusterAborted, match=r"in dc2 .*; the replica of dc2 was replaced 1 "
                                             r"time\(s\) already"):
        report(audit, 20, {"dc0": (A, 20), "dc1": (A, 20), "dc2": (X, 20)})


def test_without_a_majority_the_run_stops_with_recovery_or_without():
    for repair in (True, False):
        audit, _, replacing = auditing(repair=repair, dcs=("dc0", "dc1"))
        with pytest.raises(ClusterAborted, match="differ between dc0 .* and dc1 .*: no "
                                                 "majority to copy from$"):
            report(audit, 5, {"dc0": (A, 5), "dc1": (X, 5)})
        assert not replacing.repairs


def test_a_count_error_alone_stops_a_run_without_recovery_and_is_logged_with_it():
    for repair in (False, True):
        audit, records, replacing = auditing(repair, dcs=("dc0",))
        report(audit, 10, {"dc0": (A, 10)})
        report(audit, 20, {"dc0": (A, 19)})
        if not repair:
            with pytest.raises(ClusterAborted, match="dc0's optimizer applied 19 updates "
                                                     "of key 0 by round 20, 20 expected: an "
                                                     "update was lost"):
                report(audit, 30, {"dc0": (A, 29)})
        else:
            report(audit, 30, {"dc0": (A, 29)})
            assert audit.count_errors == 1 and not replacing.repairs


def test_no_repair_starts_while_a_replacement_runs_and_its_plan_voids_older_reports():
    audit, _, replacing = auditing(repair=True)
    replacing.current = ServerReplacement("dc1", ("dc0", "dc2"), deadline=1.0)
    report(audit, 10, {"dc0": (A, 10), "dc1": (A, 10), "dc2": (X, 10)})
    assert not replacing.repairs
    for dc in ("dc0", "dc2"):
        replacing.current.report(dc, [[0, 12, A]])
    replacing.current.make_plan()
    audit.on_heartbeat("dc2", [[0, 10, X, 10]])     # sent before the copy: not compared
    audit.on_heartbeat("dc0", [[0, 10, A, 10]])
    audit.on_heartbeat("dc1", [[0, 10, A, 10]])
    assert not replacing.repairs and audit.mismatches == 1


def test_a_round_of_many_mismatches_names_a_few_and_counts_the_rest():
    audit, records, _ = auditing(repair=False, dcs=("dc0", "dc1"))
    audit.on_heartbeat("dc0", [[key, 5, A, 5] for key in range(10)])
    with pytest.raises(ClusterAborted) as stopped:
        audit.on_heartbeat("dc1", [[key, 5, X, 5] for key in range(10)])
    assert str(stopped.value).count("differ between") == 3
    assert "; and 7 more" in str(stopped.value)
    assert len(records[-1]["mismatches"]) == 10


def test_the_end_of_the_run_records_what_waits_and_acts_on_nothing():
    audit, records, replacing = auditing(repair=False)
    audit.on_heartbeat("dc0", [[0, 10, A, 10]])
    audit.on_heartbeat("dc1", [[0, 10, X, 10]])
    audit.finish()
    assert records[-1]["mismatches"] and not replacing.repairs
