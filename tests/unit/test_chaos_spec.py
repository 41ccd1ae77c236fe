"""netstorm.bench.chaos_spec: the --chaos spec, the seeded schedule and the arithmetic of
goodput, time to recover and lost or doubled updates (pure)."""

import pytest
from netstorm.bench.chaos_spec import (KINDS, ChaosSpecError, FaultKind, goodput,
                                       lost_or_doubled, parse_seconds, parse_spec,
                                       recovery_times, round_times, schedule,
                                       summarize_recoveries)

DCS = ("dc0", "dc1", "dc2")
LINKS = (("dc0", "dc1"), ("dc0", "dc2"), ("dc1", "dc2"))


def test_all_is_every_kind_with_the_default_lengths():
    kinds = parse_spec("all")
    assert [k.name for k in kinds] == list(KINDS)
    assert {k.name: k.length_s for k in kinds} == {
        "server": 0, "dc-stop": 20, "link-cut": 20, "worker": 0, "scheduler": 0}


def test_lengths_and_order_are_kept():
    assert parse_spec(" worker, dc-stop:30s ,link-cut:1.5m") == (
        FaultKind("worker"), FaultKind("dc-stop", 30.0), FaultKind("link-cut", 90.0))


@pytest.mark.parametrize("text, words", [
    ("", "no fault kind"), ("server,disk", "unknown fault kind 'disk'"),
    ("worker:10s", "worker takes no length"), ("dc-stop:0s", "--chaos dc-stop"),
    ("dc-stop:soon", "not a length of time"), ("server,server", "server is given twice")])
def test_a_bad_spec_is_refused_naming_the_flag(text, words):
    with pytest.raises(ChaosSpecError, match="--chaos") as exc:
        parse_spec(text)
    assert words in str(exc.value)


@pytest.mark.parametrize("text, seconds", [("60", 60.0), ("60s", 60.0), ("2m", 120.0),
                                           ("0.5s", 0.5), ("15min", 900.0)])
def test_seconds(text, seconds):
    assert parse_seconds(text, "--every") == seconds


def test_a_bad_time_names_its_flag():
    with pytest.raises(ChaosSpecError, match="--every: '-3s'"):
        parse_seconds("-3s", "--every")


def test_the_schedule_has_every_kind_once_per_cycle_and_is_seeded():
    kinds = parse_spec("all")
    faults = schedule(kinds, 60, 900, 7, DCS, 2, LINKS)
    assert len(faults) == 15 and [f.at_s for f in faults] == [60.0 * i for i in range(1, 16)]
    for cycle in range(3):
        assert sorted(f.kind for f in faults[5 * cycle:5 * cycle + 5]) == sorted(KINDS)
    assert faults == schedule(kinds, 60, 900, 7, DCS, 2, LINKS)
    assert faults != schedule(kinds, 60, 900, 8, DCS, 2, LINKS)
    for f in faults:
        assert f.index == faults.index(f)
        if f.kind in ("server", "dc-stop"):
            assert f.target in DCS
        elif f.kind == "worker":
            dc, _, i = f.target.partition("/")
            assert dc in DCS and i in ("0", "1")
        elif f.kind == "link-cut":
            assert tuple(f.target.split("-")) in LINKS and f.length_s == 20
        else:
            assert f.target == "scheduler"


def test_targets_are_spread_over_a_long_schedule():
    faults = schedule(parse_spec("server,worker"), 1, 200, 1, DCS, 2, LINKS)
    assert {f.target for f in faults if f.kind == "server"} == set(DCS)
    assert len({f.target for f in faults if f.kind == "worker"}) == 6


def test_dc_stop_spares_the_scheduler_dc():
    faults = schedule(parse_spec("dc-stop"), 1, 60, 1, DCS, 1, LINKS, scheduler_dc="dc0")
    assert {f.target for f in faults} == {"dc1", "dc2"}


def test_a_short_duration_still_has_one_fault():
    assert len(schedule(parse_spec("worker"), 60, 30, 1, DCS, 1)) == 1


def test_a_link_cut_without_links_and_bad_times_are_refused():
    with pytest.raises(ChaosSpecError, match="link-cut: nothing to target"):
        schedule(parse_spec("link-cut"), 60, 900, 1, DCS, 1, links=())
    with pytest.raises(ChaosSpecError, match="--every and --duration"):
        schedule(parse_spec("worker"), 0, 900, 1, DCS, 1)


def test_goodput():
    assert goodput(1000, 4.0) == 250.0
    assert goodput(0, 4.0) == 0.0 and goodput(100, 0.0) == 0.0


def test_round_times_keep_the_round_ends_in_arrival_order():
    steps = [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (3, 9.0), (4, 10.0)]
    assert round_times(steps) == steps
    assert round_times(steps, 2) == [(1, 2.0), (2, 4.0), (2, 10.0)]


def _rounds(times):
    return list(enumerate(times, start=1))


def test_recovery_of_a_kill_that_stalls_two_rounds():
    # one round a second, a fault at 5.5, round 6 only at 9.0, then 10.0, 11.0
    rounds = _rounds([1.0, 2.0, 3.0, 4.0, 5.0, 9.0, 10.0, 11.0])
    out = recovery_times(rounds, 5.5)
    assert out == {"median_before_s": 1.0, "next_round_s": 3.5, "steady_s": 4.5}


def test_a_slow_round_after_the_fault_is_not_steady():
    rounds = _rounds([1.0, 2.0, 3.0, 4.0, 7.0, 8.5, 9.6, 10.7])   # 1.5, 1.1 (ok at 10%)
    out = recovery_times(rounds, 4.5)
    assert out["next_round_s"] == 2.5 and out["steady_s"] == pytest.approx(5.1)


def test_a_cluster_restart_recovers_only_beyond_the_round_reached():
    # rounds 1-6 at 1/s, restarted from round 3's checkpoint: 4, 5, 6 recomputed, then 7
    rounds = [*_rounds([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), (4, 20.0), (5, 21.0), (6, 22.0),
              (7, 23.0), (8, 24.0)]
    out = recovery_times(rounds, 6.5)
    assert out["next_round_s"] == 16.5 and out["steady_s"] == 17.5


def test_recovery_never_seen():
    assert recovery_times(_rounds([1.0, 2.0, 3.0]), 3.5) == {
        "median_before_s": 1.0, "next_round_s": None, "steady_s": None}
    assert recovery_times(_rounds([5.0, 6.0]), 1.0)["steady_s"] is None     # nothing before


def test_recoveries_by_kind():
    events = [{"kind": "server", "next_round_s": 2.0, "steady_s": 3.0},
              {"kind": "server", "next_round_s": 4.0, "steady_s": None},
              {"kind": "worker", "next_round_s": 1.0, "steady_s": 1.0}]
    assert summarize_recoveries(events) == {
        "server": {"count": 2, "next_round_median_s": 3.0, "next_round_max_s": 4.0,
                   "steady_median_s": 3.0, "steady_max_s": 3.0, "never_steady": 1},
        "worker": {"count": 1, "next_round_median_s": 1.0, "next_round_max_s": 1.0,
                   "steady_median_s": 1.0, "steady_max_s": 1.0, "never_steady": 0}}


def test_lost_or_doubled_counts_each_source():
    clean = lost_or_doubled([], ["a", "a", "a"], [10, 10, 10], 10)
    assert clean == {"audit_mismatches": None, "audit_records": 0, "replicas_differing": 0,
                     "steps_missing": 0, "total": 0}
    audits = [{"kind": "replica_audit", "round": 4, "mismatches": []},
              {"kind": "replica_audit", "round": 8, "mismatches": [{"key": 3}, {"key": 5}]}]
    bad = lost_or_doubled(audits, ["a", "b", "a"], [10, 7, 10], 10)
    assert bad == {"audit_mismatches": 2, "audit_records": 2, "replicas_differing": 1,
                   "steps_missing": 3, "total": 6}


def test_rounds_done_after_a_fault_then_redone_by_a_restart_count_as_lost():
    # rounds 1-6 at 1/s; the scheduler killed at 5.5, rounds 6, 7 still complete, then the
    # cluster restarts from round 3's checkpoint: 4, 5, 6, 7 again, then 8, 9
    rounds = [*_rounds([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), (7, 6.5), (4, 20.0), (5, 21.0),
              (6, 22.0), (7, 23.0), (8, 24.0), (9, 25.0)]
    assert recovery_times(rounds, 5.5)["next_round_s"] == 18.5
    assert recovery_times(rounds, 5.5)["steady_s"] == 19.5
    # a restart after the next fault (at 10) is that fault's, not this one's
    assert recovery_times(rounds, 5.5, until=10.0)["next_round_s"] == 0.5
