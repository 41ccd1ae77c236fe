"""bench_perf_profile: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_bench_perf_profile.py."""

import time
import pytest
from netstorm.bench.perf_profile import (Recorder, classify, unavailable)


@pytest.mark.system_package("linux-perf")      # tests/conftest.py
@pytest.mark.alone
def test_a_real_recording_is_classified(tmp_path):
    if unavailable():
        pytest.skip(f"perf cannot sample this machine: {unavailable()}")
    recorder = Recorder(tmp_path / "perf.data")
    recorder.start()
    time.sleep(0.5)                         # perf starting (later on a loaded machine:
    began = time.monotonic()                # the window is long enough to hold 50 anyway)
    while time.monotonic() < began + 2.0:   # busy: samples in this Python process
        sum(range(1000))
    ended = time.monotonic()
    time.sleep(0.5)                         # idle: left out by the window below
    assert recorder.stop()
    profile = classify(tmp_path / "perf.data", began, ended)
    assert profile["samples"] > 50
    assert abs(sum(profile["shares"].values()) - 1.0) < 0.01
    assert profile["shares"].get("Python", 0) > 0.2
    everything = classify(tmp_path / "perf.data")
    # the half-seconds around the window count only without it: as idle samples on an idle
    # machine, as busy ones when other processes keep every CPU busy (then none is idle)
    assert everything["samples"] >= profile["samples"]
    assert everything["samples"] > profile["samples"] or everything["idle"] > profile["idle"]
