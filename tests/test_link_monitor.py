"""geoserver.link_monitor: rates from arrival times of the traffic itself, no clocks shared."""
import random

import pytest

from netstorm.geoserver.link_monitor import LinkMonitor

MB = 1 << 20


def feed(monitor, source, rate_mbps, n, size=MB, start=0.0, jitter_s=0.0, rng=None,
         first_queued=False):
    """n messages of ``size`` back to back over a link of ``rate_mbps``; the receiver's
    timestamps are late by up to ``jitter_s`` (its own scheduling). Returns the end time."""
    t = start
    for i in range(n):
        t += size * 8 / (rate_mbps * 1e6)
        late = rng.uniform(0, jitter_s) if rng else 0.0
        monitor.on_arrival(source, size, queued=(i > 0 or first_queued), now=t + late)
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
