"""HeapReleaser: malloc_trim after a large refused message, at most once per interval, and
the last of a burst released at the next poll."""
import pytest

from netstorm.geoserver.core import heap


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def released(monkeypatch):
    calls = []
    clock = FakeClock()
    monkeypatch.setattr(heap, "_glibc", lambda name: calls.append)
    return calls, clock


def test_a_request_releases_at_once_then_waits_for_the_interval(released):
    calls, clock = released
    releaser = heap.HeapReleaser(min_interval_s=1.0, clock=clock)
    releaser.request()
    assert calls == [0] and not releaser.pending
    clock.now += 0.5
    releaser.request()                  # too soon: remembered, not dropped
    assert calls == [0] and releaser.pending
    assert not releaser.poll()
    clock.now += 0.6
    assert releaser.poll() and calls == [0, 0] and releaser.releases == 2
    assert not releaser.poll()          # nothing pending


def test_without_malloc_trim_nothing_is_pending(monkeypatch):
    monkeypatch.setattr(heap, "_glibc", lambda name: None)
    releaser = heap.HeapReleaser()
    releaser.request()
    assert not releaser.pending and not releaser.poll() and releaser.releases == 0


def test_glibc_s_malloc_trim_and_mallopt_are_found_here():
    assert heap._glibc("malloc_trim") is not None      # these machines run glibc
    assert heap.return_large_buffers()
