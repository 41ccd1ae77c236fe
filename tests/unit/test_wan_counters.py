"""netstorm.wan.counters: /proc/net/dev parsing and the fallback without setns."""
from netstorm.wan.counters import LinkCounters, parse_net_dev

TEXT = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
nwab1-0a: 176       2    0    0    0     0          0         0    10510      11    0    0    0     0       0          0
  garbage line
"""


def test_parse_net_dev_reads_the_transmit_bytes_of_each_device():
    assert parse_net_dev(TEXT) == {"lo": 0, "nwab1-0a": 10510}


class FakeWan:
    """A WAN whose namespaces do not exist: setns fails, reads go through link_bytes."""

    def link_devices(self):
        return {("a", "b"): ("netstorm-nosuchrun-a", "nwx-0a")}

    def link_bytes(self):
        return {("a", "b"): 42}


def test_without_the_namespaces_it_falls_back_to_link_bytes():
    with LinkCounters(FakeWan()) as counters:
        assert not counters.fast
        assert counters.read() == {("a", "b"): 42}
