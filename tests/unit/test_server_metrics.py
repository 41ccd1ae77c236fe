"""geoserver/server/metrics.py: a DC server's collector over fake parts (the real pure
ones where they exist: the link monitor, rate-limited logs, round gate, step balancer,
error feedback); its live counterpart is tests/cluster/test_metrics.py."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from fakes import sample as value, scraped
from netstorm.geoserver.compression.feedback import ErrorFeedback
from netstorm.geoserver.config.compression import CompressionConfig
from netstorm.geoserver.core.nodes import NodeInfo
from netstorm.geoserver.core.ratelog import RateLimitedLog
from netstorm.geoserver.server.metrics import ServerCollector
from netstorm.geoserver.server.esync import StepBalancer
from netstorm.geoserver.server.round_gate import RoundGate
from netstorm.geoserver.server.store_keys import KeyEntry
from netstorm.geoserver.server.wan.link_monitor import LinkMonitor

log = logging.getLogger("test")


def fake_server(now=100.0, gate=None, balancer=None, codec=None, mixed=None):
    monitor = LinkMonitor(known={"a": 100.0, "c": 10.0})
    return SimpleNamespace(
        store=SimpleNamespace(max_round=7, keys={
            0: KeyEntry(0, np.dtype("float32"), (10, 10)),
            1: KeyEntry(1, np.dtype("float16"), (3,))}, drops=RateLimitedLog(log),
            model_bytes=lambda: 10 * 10 * 4 + 3 * 2),
        stats={"messages": 42, "dropped": 0, "fused": 0},
        wan=SimpleNamespace(monitor=monitor, clock=lambda: now, _drops=RateLimitedLog(log)),
        exchange=SimpleNamespace(sent={"chunks": 5, "encoded": 0, "bytes": 5000},
                                 codec=codec, _drops=RateLimitedLog(log)),
        po=SimpleNamespace(van=SimpleNamespace(dropped=3, bulk=None),
                           _drops=RateLimitedLog(log)),
        _drops=RateLimitedLog(log), plane=None, recovery=SimpleNamespace(),
        gate=gate or RoundGate(False, 10.0), mixed=mixed, balancer=balancer,
        table=SimpleNamespace(nodes={5: NodeInfo(5, "worker", "b", "tcp://w", rank=3)}))


def test_nothing_before_the_server_is_built():
    assert scraped(ServerCollector("b")) == {}


def test_rounds_model_size_links_bytes_and_estimates():
    server = fake_server()
    monitor = server.wan.monitor
    monitor.on_arrival("a", 1000, False, 10.0)
    monitor.on_arrival("a", 400_000, True, 10.6)
    monitor.on_arrival("c", 250, False, 10.2)
    collector = ServerCollector("b")
    collector.attach(server)
    samples = scraped(collector)
    assert value(samples, "netstorm_round", role="server", dc="b") == 7
    assert value(samples, "netstorm_model_bytes") == 100 * 4 + 3 * 2
    assert value(samples, "netstorm_messages_total") == 42
    assert value(samples, "netstorm_link_bytes_total", link="a->b") == 401_000
    assert value(samples, "netstorm_link_bytes_total", link="c->b") == 250
    mbps, age = monitor.estimates(100.0)["a"]
    assert value(samples, "netstorm_link_estimate_mbps", link="a->b") == pytest.approx(mbps)
    assert value(samples, "netstorm_link_estimate_age_seconds", link="a->b") == \
        pytest.approx(age)
    assert value(samples, "netstorm_link_estimate_mbps", link="c->b") is None   # no window
    assert value(samples, "netstorm_wan_chunk_bytes_sent_total") == 5000


def test_dropped_messages_by_reason():
    server = fake_server()
    for _ in range(4):
        server.po._drops.log("x", "dropped: %s", "not from that node")
    server.exchange._drops.log("y", "dropped duplicate")
    collector = ServerCollector("b")
    collector.attach(server)
    samples = scraped(collector)
    assert value(samples, "netstorm_dropped_messages_total", reason="malformed") == 3
    assert value(samples, "netstorm_dropped_messages_total", reason="refused") == 4
    assert value(samples, "netstorm_dropped_messages_total", reason="exchange") == 1
    assert value(samples, "netstorm_dropped_messages_total", reason="store") == 0
    assert value(samples, "netstorm_dropped_messages_total", reason="native_exchange") is None


def test_waits_staleness_step_times_and_the_residual_norm():
    gate = RoundGate(True, 10.0)
    gate.waits, gate.waited_s = 2, 0.75
    balancer = StepBalancer(4)
    balancer.step_s[5] = 0.125
    feedback = ErrorFeedback(CompressionConfig(type="bsc"))
    feedback.residual(0, 4)[:] = [3.0, 0.0, 0.0, 0.0]
    feedback.residual(1, 2)[:] = [0.0, 4.0]
    mixed = SimpleNamespace(staleness_seen=3, waits=9)
    collector = ServerCollector("b")
    collector.attach(fake_server(gate=gate, balancer=balancer, mixed=mixed,
                                 codec=SimpleNamespace(feedback=feedback)))
    samples = scraped(collector)
    assert value(samples, "netstorm_round_gate_waits_total") == 2
    assert value(samples, "netstorm_round_gate_wait_seconds_total") == 0.75
    assert value(samples, "netstorm_worker_step_seconds", rank="3") == 0.125
    assert value(samples, "netstorm_compression_residual_norm") == pytest.approx(5.0)
    assert value(samples, "netstorm_staleness_max_rounds") == 3
    assert value(samples, "netstorm_mixed_waits_total") == 9


def test_a_table_caught_changing_leaves_only_its_part_out():
    server = fake_server()

    class Changing(dict):
        def items(self):
            raise RuntimeError("dictionary changed size during iteration")
    server.wan.monitor.received_bytes = lambda: Changing({"a": 1}).items()
    collector = ServerCollector("b")
    collector.attach(server)
    samples = scraped(collector)
    assert value(samples, "netstorm_link_bytes_total", link="a->b") is None
    assert value(samples, "netstorm_round") == 7
