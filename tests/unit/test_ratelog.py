"""netstorm.geoserver.core.ratelog: a few lines per peer and interval, the rest counted and
reported with the peer's next line; all peers together are capped too."""
import logging

from fakes import Clock
from netstorm.geoserver.core.ratelog import RateLimitedLog

log = logging.getLogger("test.ratelog")


def limited(**kwargs):
    clock = Clock()
    return RateLimitedLog(log, clock=clock, **kwargs), clock


def lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == log.name]


def test_each_peer_gets_its_lines_per_interval_and_the_rest_are_counted(caplog):
    limiter, clock = limited(lines=2, interval_s=10.0)
    written = [limiter.log("a", "bad message %d", i) for i in range(5)]
    assert written == [True, True, False, False, False] and limiter.suppressed == 3
    assert limiter.log("b", "bad message from b")          # another peer has its own budget
    clock.t += 10.0
    assert limiter.log("a", "bad message %d", 5)
    assert lines(caplog) == ["bad message 0", "bad message 1", "bad message from b",
                             "bad message 5 (3 similar lines about a suppressed)"]


def test_all_peers_together_are_capped(caplog):
    limiter, clock = limited(lines=2, interval_s=1.0, total_lines=3)
    assert [limiter.log(peer, "x") for peer in "abcd"] == [True, True, True, False]
    clock.t += 1.0
    assert limiter.log("d", "y")
    assert lines(caplog)[-1] == "y (1 similar lines about d suppressed)"


def test_memory_is_bounded_by_max_peers():
    limiter, _ = limited(lines=1, max_peers=3)
    for peer in range(100):
        limiter.log(peer, "x")
    assert len(limiter._peers) == 3 and list(limiter._peers) == [97, 98, 99]


def test_the_level_is_chosen_by_the_caller(caplog):
    limiter, _ = limited(level=logging.ERROR)
    with caplog.at_level(logging.INFO):
        limiter.log("a", "refused")
    assert [r.levelno for r in caplog.records if r.name == log.name] == [logging.ERROR]
