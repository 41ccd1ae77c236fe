"""geoserver.link_monitor: rates from arrival times of the traffic itself, no clocks shared."""
import random

import pytest

from netstorm.geoserver.server.wan.link_monitor import LinkMonitor

MB = 1 << 20


def feed(monitor, source, rate_mbps, n, size=MB, start=0.0, jitter_s=0.0, rng=None,
         first_queued=False, behind=False):
    """n messages of ``size`` back to back over a link of ``rate_mbps``; the receiver's
    timestamps are late by up to ``jitter_s`` (its own scheduling); ``behind``: the
    receiver found another message waiting each time. Returns the end time."""
    t = start
    for i in range(n):
        t += size * 8 / (rate_mbps * 1e6)
        late = rng.uniform(0, jitter_s) if rng else 0.0
        monitor.on_arrival(source, size, queued=(i > 0 or first_queued), now=t + late,
                           behind=behind)
    return t


@pytest.mark.parametrize("rate", [5.0, 20.8, 85.5, 600.0])
def test_a_busy_link_of_known_rate_is_measured_within_two_percent(rate):
    monitor = LinkMonitor()
    rng = random.Random(1)
    end = feed(monitor, "dc2", rate, n=200, size=256 * 1024, jitter_s=0.003, rng=rng)
    mbps, age = monitor.estimates(end + 0.003)["dc2"]
    assert abs(mbps - rate) / rate < 0.02, mbps
    assert 0 <= age < 1.0


def test_idle_gaps_before_unqueued_messages_are_not_counted():
    monitor = LinkMonitor()
    t = 0.0
    for burst in range(20):                      # bursts of 8 MiB with 2 s idle between
        t = feed(monitor, "a", 40.0, n=8, start=t + 2.0)
    mbps, _ = monitor.estimates(t)["a"]
    assert abs(mbps - 40.0) / 40.0 < 0.02


def test_a_rate_change_is_followed_within_a_few_time_constants():
    monitor = LinkMonitor(tau_s=1.5)
    t = feed(monitor, "a", 100.0, n=300)
    t = feed(monitor, "a", 25.0, n=30, start=t, first_queued=True)     # ~10 s at 25
    mbps, _ = monitor.estimates(t)["a"]
    assert abs(mbps - 25.0) / 25.0 < 0.05, mbps


def test_links_are_separate_and_unmeasured_ones_are_absent():
    monitor = LinkMonitor()
    feed(monitor, "a", 10.0, n=50)
    feed(monitor, "b", 50.0, n=200)
    monitor.on_arrival("c", 100, queued=False, now=1.0)
    est = monitor.estimates(100.0)
    assert set(est) == {"a", "b"}
    assert est["a"][0] == pytest.approx(10.0, rel=0.02)
    assert est["b"][0] == pytest.approx(50.0, rel=0.02)
    report = monitor.report(100.0)
    assert set(report) == {"a", "b"} and all(len(v) == 2 for v in report.values())


def test_clock_going_backwards_or_bad_settings_do_not_corrupt():
    monitor = LinkMonitor()
    monitor.on_arrival("a", MB, queued=True, now=5.0)
    monitor.on_arrival("a", MB, queued=True, now=4.0)          # earlier than the last
    assert monitor.estimates(6.0) == {}
    with pytest.raises(ValueError):
        LinkMonitor(window_s=0)


def test_a_short_probe_burst_on_an_idle_link_is_measured_when_it_ends():
    monitor = LinkMonitor()
    t = feed(monitor, "a", 30.0, n=8, size=64 * 1024)          # 512 KiB: 0.14 s, no window
    assert monitor.estimates(t) == {}
    monitor.on_arrival("a", 100, queued=False, now=t + 10.0)   # the next thing ends it
    mbps, age = monitor.estimates(t + 10.0)["a"]
    assert mbps == pytest.approx(30.0, rel=0.02) and age == pytest.approx(10.0)
    small = LinkMonitor()
    t = feed(small, "a", 30.0, n=3, size=64 * 1024)            # too few bytes to trust
    small.on_arrival("a", 100, queued=False, now=t + 1.0)
    assert small.estimates(t + 1.0) == {}


def test_one_slow_window_does_not_move_the_estimate_but_a_lasting_change_does():
    """On a loaded host the sending server may leave a link idle for a moment: the window
    that includes the gap is slow. The median of three ignores it; two slow windows in a row
    are a change and are followed."""
    monitor = LinkMonitor(tau_s=1.5)
    t = feed(monitor, "a", 80.0, n=100)
    t += 0.4                                                    # the sender was busy
    t = feed(monitor, "a", 80.0, n=5, start=t, first_queued=True)
    mbps, _ = monitor.estimates(t)["a"]
    assert mbps == pytest.approx(80.0, rel=0.02)
    t = feed(monitor, "a", 20.0, n=12, start=t, first_queued=True)   # 5 s at 20
    mbps, _ = monitor.estimates(t)["a"]
    assert mbps < 30.0


def test_a_link_measured_only_by_sparse_probes_follows_a_change_at_the_next_probe():
    """An idle link gets a 512 KiB probe burst every 5 s. A burst is short, but it is the
    only news for seconds: the estimate must follow it, not drift a few percent per probe."""
    monitor = LinkMonitor(tau_s=1.5)
    t = 0.0
    for rate in (65.0, 65.0, 33.0):
        t = feed(monitor, "a", rate, n=8, size=64 * 1024, start=t + 5.0)
        monitor.on_arrival("a", 100, queued=False, now=t + 0.01)      # the run ends
    mbps, _ = monitor.estimates(t + 0.01)["a"]
    assert mbps == pytest.approx(33.0, rel=0.05)


@pytest.mark.parametrize("known", [None, 100.0])
@pytest.mark.parametrize("then_idle", [False, True])
def test_a_receiver_that_paused_and_drains_its_buffers_does_not_read_a_fast_link(known,
                                                                                 then_idle):
    """A 100 Mbit/s link; the receiver pauses 3 s (the link goes on filling its socket
    buffers), then reads what waited back to back in 10 ms, and either goes on at the
    link's pace or finds the link idle (the next message not QUEUED). Without the bound
    the drained bytes read as 1,400 or 30,000 Mbit/s in one window, which the median of
    three windows keeps out; with it they are spread over windows at twice the link's
    rate: no estimate exceeds 2x, and it is back within 5% a few seconds later."""
    monitor = LinkMonitor(known=None if known is None else {"a": known})
    rate, size, seen = 100.0, 256 * 1024, []
    t = feed(monitor, "a", rate, n=200, size=size)          # ~4.2 s busy: estimate made
    seen.append(monitor.estimates(t)["a"][0])
    drained = int(3.0 * rate * 1e6 / 8 / size)
    for i in range(drained):                                # all read within 10 ms
        monitor.on_arrival("a", size, queued=True, now=t + 3.0 + 0.01 * i / drained)
        seen.append(monitor.estimates(t + 3.01)["a"][0])
    t += 3.01
    if then_idle:
        monitor.on_arrival("a", size, queued=False, now=t + 0.001)
        seen.append(monitor.estimates(t + 0.001)["a"][0])
        t = feed(monitor, "a", rate, n=300, size=size, start=t + 2.0)
    else:
        t = feed(monitor, "a", rate, n=300, size=size, start=t, first_queued=True)
    seen.append(monitor.estimates(t)["a"][0])
    assert max(seen) <= 2 * rate, seen
    assert abs(seen[-1] - rate) / rate < 0.05


def test_a_probe_burst_read_at_once_after_a_pause_reads_at_most_twice_the_link():
    """A link measured only by probe bursts (16 pieces of 64 KiB every 5 s, 84 ms at
    100 Mbit/s). Once the receiver was paused while a burst arrived and reads it in 1 ms:
    unbounded, that burst alone would read as ~8,400 Mbit/s and replace the estimate (no
    recent windows to take a median of); bounded by twice the known rate it cannot."""
    piece, rate = 64 * 1024, 100.0
    for known in (None, {"a": 80.0}):
        monitor, t, seen = LinkMonitor(known=known), 0.0, []
        for burst in range(8):
            t = feed(monitor, "a", rate, n=16, size=piece, start=t + 5.0)
            monitor.on_arrival("a", 100, queued=False, now=t + 0.5)     # ends the burst
            seen.append(monitor.estimates(t + 0.5)["a"][0])
        t += 5.0
        for i in range(16):                                     # read back to back
            monitor.on_arrival("a", piece, queued=i > 0, now=t + 0.001 * i / 16)
        monitor.on_arrival("a", 100, queued=False, now=t + 0.5)
        seen.append(monitor.estimates(t + 0.5)["a"][0])
        assert abs(seen[-2] - rate) / rate < 0.03 and seen[-1] <= 2 * rate, seen


def test_a_real_rise_is_followed_at_most_twofold_per_window():
    monitor = LinkMonitor(tau_s=1.5)
    t = feed(monitor, "a", 20.0, n=40)
    t = feed(monitor, "a", 200.0, n=400, start=t, first_queued=True)
    assert abs(monitor.estimates(t)["a"][0] - 200.0) / 200.0 < 0.02


def test_a_receiver_that_is_behind_leaves_the_estimate_as_it_is():
    """A link known at 100 Mbit/s whose receiver falls behind: reading at 30 (TCP lets the
    link deliver no faster) or draining at 150, the estimate stays at 100 and ages (no
    window measured the link); once the receiver keeps up, a real drop to 30 is
    followed."""
    monitor = LinkMonitor(known={"a": 100.0})
    t = feed(monitor, "a", 100.0, n=60)
    measured = monitor.estimates(t)["a"]
    t = feed(monitor, "a", 30.0, n=60, start=t, first_queued=True, behind=True)
    mbps, age = monitor.estimates(t)["a"]
    assert abs(mbps - 100.0) < 2.0 and monitor.behind_windows > 5
    assert age > measured[1] + 3.0                  # not refreshed by slower readings
    t = feed(monitor, "a", 150.0, n=200, start=t, first_queued=True, behind=True)
    mbps, later = monitor.estimates(t)["a"]
    assert abs(mbps - 100.0) < 2.0 and later > age
    t = feed(monitor, "a", 30.0, n=60, start=t, first_queued=True)
    assert abs(monitor.estimates(t)["a"][0] - 30.0) < 1.5
    cold = LinkMonitor(known={"b": 80.0})             # no estimate yet: the planned rate
    feed(cold, "b", 20.0, n=30, behind=True)          # stands, nothing is taken
    assert "b" not in cold.estimates(100.0)
    unknown = LinkMonitor()                           # nothing known at all: the reading
    end = feed(unknown, "c", 20.0, n=30, behind=True)     # is the only news there is
    assert abs(unknown.estimates(end)["c"][0] - 20.0) < 0.5


def test_a_links_first_window_alone_does_not_replace_the_planned_rate():
    """Known at 100 Mbit/s: one window reading 50 (a retransmission timeout on the first
    chunk, say) leaves 100; a second one starts moving it, and more bring it to 50.
    Without a planned rate the first window is taken as it is."""
    monitor = LinkMonitor(known={"a": 100.0})
    t = feed(monitor, "a", 50.0, n=2, size=2 * MB)          # one window (0.34 s a message)
    t = feed(monitor, "a", 500.0, n=1, start=t)             # not QUEUED: closes the window
    assert monitor.estimates(t)["a"][0] == pytest.approx(100.0)
    t = feed(monitor, "a", 50.0, n=2, size=2 * MB, start=t)
    t = feed(monitor, "a", 500.0, n=1, start=t)
    assert monitor.estimates(t)["a"][0] < 90.0
    t = feed(monitor, "a", 50.0, n=30, size=2 * MB, start=t, first_queued=True)
    assert monitor.estimates(t)["a"][0] == pytest.approx(50.0, rel=0.02)
    fresh = LinkMonitor()
    t = feed(fresh, "a", 50.0, n=2, size=2 * MB)
    t = feed(fresh, "a", 500.0, n=1, start=t)
    assert fresh.estimates(t)["a"][0] == pytest.approx(50.0, rel=0.02)
