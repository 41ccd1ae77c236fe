"""netstorm.wan.shaping: each emulated link direction's shaper, queue and offload bound."""
import pytest

from netstorm.wan.shaping import FRAME_BYTES, MAX_GSO_BYTES, fifo_limit, gso_bytes, \
    gso_settings, htb_args, htb_burst


@pytest.mark.parametrize("mbps", [0.1, 2, 10, 40, 100, 400, 20000])
def test_offload_packets_fit_the_shaper_burst_and_the_queue(mbps):
    size = gso_bytes(mbps)
    assert FRAME_BYTES <= size <= MAX_GSO_BYTES
    assert size <= htb_burst(mbps) and size <= fifo_limit(mbps) // 8
    assert gso_bytes(2) == 8192 and gso_bytes(400) == MAX_GSO_BYTES


def test_shaper_arguments_carry_the_rate_and_the_burst():
    assert htb_burst(1) == 16 * 1024 and htb_burst(400) == 250000
    assert htb_args(2.5) == ["rate", "2500kbit", "ceil", "2500kbit", "burst", "16384b",
                             "cburst", "16384b"]
    assert fifo_limit(1) == 64 * 1024 and fifo_limit(400) == 5000000
    assert gso_settings(400) == f"gso_max_size {MAX_GSO_BYTES} gso_max_segs 43"
    assert gso_settings(0.1) == f"gso_max_size 8192 gso_max_segs {8192 // FRAME_BYTES}"
