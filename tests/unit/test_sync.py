"""SyncConfig: the [sync] setting, parsed once with errors naming the field; and each mode
end to end on live clusters (slow)."""

import pytest
from netstorm.geoserver.config.sync import MAX_COUNT, SyncConfig, SyncError


def test_default_is_fully_synchronous_and_every_round_crosses_the_wan():
    sync = SyncConfig.from_params(None)
    assert sync.mode == "fsa" and not sync.local_steps and not sync.asynchronous
    assert [sync.wan_round(r) for r in (1, 2, 3)] == [1, 2, 3]
    assert all(sync.crosses_wan(r) for r in (1, 2, 3))


def test_hfa_groups_k2_dc_rounds_into_one_wan_round():
    sync = SyncConfig.from_params({"mode": "hfa", "k1": 4, "k2": 3})
    assert sync.local_steps and (sync.k1, sync.k2) == (4, 3)
    assert [sync.wan_round(r) for r in range(1, 8)] == [1, 1, 1, 2, 2, 2, 3]
    assert [r for r in range(1, 10) if sync.crosses_wan(r)] == [3, 6, 9]


def test_esync_and_mixed_cross_the_wan_every_round():
    for sync in (SyncConfig(mode="esync", k2=5), SyncConfig(mode="mixed")):
        assert sync.rounds_per_wan_round == 1 and sync.crosses_wan(1)
    assert SyncConfig(mode="mixed").asynchronous and SyncConfig(mode="esync").local_steps


@pytest.mark.parametrize("params,message", [
    ({"mode": "hfa", "k1": 0}, r"k1 must be a whole number in 1\.\."),
    ({"mode": "hfa", "k2": 2.5}, r"k2 must be a whole number"),
    ({"mode": "hfa", "k2": True}, r"k2 must be a whole number"),
    ({"mode": "mixed", "staleness": -1}, r"staleness must be a whole number in 0\.\."),
    ({"mode": "esync", "max_steps": MAX_COUNT + 1}, r"max_steps must be"),
    ({"mode": "hfa", "staleness": 2}, r"mode 'hfa' takes no 'staleness' \(it takes 'k1', "
                                      r"'k2', 'quorum', 'grace_s'\)"),
    ({"mode": "diloco", "quorum": -1}, r"quorum must be a whole number in 0\.\."),
    ({"mode": "hfa", "grace_s": -1}, r"grace_s must be a number with 0 <= grace_s"),
    ({"mode": "diloco", "quorum": 2, "fragments": 2}, r"quorum cannot run with fragments"),
    ({"mode": "hfa", "quorum": 2, "k2": 2}, r"quorum needs k2 = 1 under hfa"),
    ({"mode": "fsa", "k1": 2}, r"mode 'fsa' takes no 'k1' \(it takes nothing\)"),
    ({"mode": "dcasgd"}, r"sync mode 'dcasgd' is unknown; accepted: 'fsa', 'hfa'"),
    ("hfa", r"must be a table"),
    ({"mode": "diloco", "h": 0}, r"h must be a whole number in 1\.\."),
    ({"mode": "diloco", "outer_lr": 0}, r"outer_lr must be a number with 0 < outer_lr"),
    ({"mode": "diloco", "outer_lr": float("nan")}, r"outer_lr must be a number"),
    ({"mode": "diloco", "outer_momentum": 1.0}, r"0 <= outer_momentum < 1, got 1\.0"),
    ({"mode": "diloco", "mix": True}, r"mix must be a number"),
    ({"mode": "diloco", "h": 4, "fragments": 5}, r"fragments \(5\) must be at most h \(4\)"),
    ({"mode": "diloco", "h": 4, "delay": 4}, r"delay \(4\) must be less than h \(4\)"),
    ({"mode": "diloco", "k1": 2}, r"mode 'diloco' takes no 'k1' \(it takes 'h', "),
])
def test_bad_settings_name_the_field(params, message):
    with pytest.raises(SyncError, match=message):
        SyncConfig.from_params(params)


def test_the_flag_form_reads_back_what_describe_writes():
    for text in ("fsa", "hfa:k1=4,k2=2", "mixed:staleness=0", "esync:max_steps=3",
                 "diloco:h=50,outer_lr=0.7,outer_momentum=0.9,fragments=4,delay=5,mix=0.5"):
        sync = SyncConfig.parse(text)
        assert sync.describe() == text and SyncConfig.parse(sync.describe()) == sync
    assert SyncConfig.parse("hfa:k1=3") == SyncConfig(mode="hfa", k1=3)
    with pytest.raises(SyncError, match=r"--sync: expected NAME=N after 'hfa:', got 'k1'"):
        SyncConfig.parse("hfa:k1")
    with pytest.raises(SyncError, match=r"--sync: sync mode 'mixed' takes no 'k1'"):
        SyncConfig.parse("mixed:k1=2")
    for bad in ("diloco:outer_lr=inf", "diloco:outer_lr=x", "diloco:h=1e400"):
        with pytest.raises(SyncError, match=r"--sync: expected NAME=N after 'diloco:'"):
            SyncConfig.parse(bad)


def test_diloco_is_a_local_steps_mode_that_averages_and_streams_with_fragments_or_delay():
    plain = SyncConfig.parse("diloco:h=10")
    assert plain.local_steps and plain.averaged and not plain.streaming
    assert plain.rounds_per_wan_round == 1 and plain.crosses_wan(1)
    assert (plain.outer_lr, plain.outer_momentum, plain.mix) == (0.7, 0.9, 0.5)
    assert SyncConfig.parse("diloco:h=10,fragments=2").streaming
    assert SyncConfig.parse("diloco:h=10,delay=3").streaming
    assert SyncConfig.parse("hfa").averaged and not SyncConfig.parse("esync").averaged
    assert isinstance(SyncConfig.parse("diloco:outer_lr=1").outer_lr, float)


def test_json_round_trip_and_malformed_json_refused():
    sync = SyncConfig(mode="hfa", k1=2, k2=5)
    assert SyncConfig.from_json(sync.to_json()) == sync
    assert sync.to_params() == {"mode": "hfa", "k1": 2, "k2": 5}
    for bad in ([], {"mode": "hfa"}, {**sync.to_json(), "extra": 1}):
        with pytest.raises(SyncError):
            SyncConfig.from_json(bad)
