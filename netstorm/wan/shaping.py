"""How one emulated link direction is shaped: the tc htb class (its rate, and a burst of
max(16 KiB, 5 ms of traffic)), the bfifo under it (100 ms of traffic, at least 64 KiB), and
the largest segmentation-offload (GSO) packet its sending veth may hand the shaper
(:func:`gso_bytes`; why: :mod:`.emulator`'s docstring and docs/wan.md). Pure arithmetic and
command arguments, O(1) each; :class:`~netstorm.wan.emulator.EmulatedWan` runs them.
"""
from __future__ import annotations

__all__ = ["FRAME_BYTES", "MAX_GSO_BYTES", "fifo_limit", "gso_bytes", "gso_settings",
           "htb_args", "htb_burst"]


def _kbit(mbps: float) -> int:
    return max(1, round(mbps * 1000))


def htb_burst(mbps: float) -> int:
    """Bytes the shaper may send at once at ``mbps``: max(16 KiB, 5 ms of traffic)."""
    return max(16 * 1024, round(mbps * 1e6 / 8 * 0.005))


def htb_args(mbps: float) -> list:
    """tc htb class arguments for ``mbps``, with :func:`htb_burst` as burst and cburst."""
    burst = htb_burst(mbps)
    return ["rate", f"{_kbit(mbps)}kbit", "ceil", f"{_kbit(mbps)}kbit",
            "burst", f"{burst}b", "cburst", f"{burst}b"]


def fifo_limit(mbps: float) -> int:
    """Bytes of queue under the shaper: 100 ms of traffic, at least 64 KiB."""
    return max(64 * 1024, round(mbps * 1e6 / 8 * 0.1))


FRAME_BYTES = 1500
MAX_GSO_BYTES = 64 * 1024


def gso_bytes(mbps: float) -> int:
    """Largest offload packet a link's sender may hand its shaper at ``mbps``:
    min(64 KiB, htb burst, queue / 8), at least one frame (module docstring). O(1)."""
    return max(FRAME_BYTES, min(MAX_GSO_BYTES, htb_burst(mbps), fifo_limit(mbps) // 8))


def gso_settings(mbps: float) -> str:
    """``ip link set`` arguments that bound a veth's offload packets for ``mbps``."""
    size = gso_bytes(mbps)
    return f"gso_max_size {size} gso_max_segs {max(1, size // FRAME_BYTES)}"
