"""netstorm.geoserver.core.delay_line: messages held until they are due."""
from netstorm.geoserver.core.delay_line import DelayLine


def test_items_come_out_when_due_in_due_order_and_ties_by_arrival():
    line = DelayLine()
    assert line.wait_s(0.0) is None and line.pop_due(1e9) is None
    line.hold("far", 2.0)
    line.hold("a1", 1.0)
    line.hold("a2", 1.0)        # same due moment: after a1, as it arrived after
    assert len(line) == 3
    assert line.wait_s(0.25) == 0.75
    assert line.pop_due(0.99) is None
    assert line.pop_due(1.0) == "a1" and line.pop_due(1.0) == "a2"
    assert line.pop_due(1.5) is None and line.wait_s(1.5) == 0.5
    assert line.wait_s(3.0) == 0.0
    assert line.pop_due(3.0) == "far" and len(line) == 0


def test_one_senders_messages_keep_their_order_under_a_constant_delay():
    line = DelayLine()
    for i in range(100):
        line.hold(i, 0.001 * (i // 10) + 0.05)      # held in bursts at the same moment
    out = [line.pop_due(10.0) for _ in range(100)]
    assert out == list(range(100))
