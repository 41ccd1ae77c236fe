"""Start-up link measurement, for clusters whose file does not declare the WAN's rates.

Bounded and short: when the scheduler asks (PROBE_REQUEST), every DC server streams
``probe_bytes`` to every other server at once, cut in ``PIECES`` messages, so every directed
pair carries one flow at the same time, as training will. Each *receiver* times what it gets
with its own clock — from the first piece's arrival to the last — so no clocks need to agree
across DCs. After ``timeout_s`` a receiver reports what it has; a pair that delivered nothing
is reported as 0 (no usable link). A peer's pieces may arrive before this DC's own request
from the scheduler: they are counted all the same. Pure logic: the server does the sending
and receiving.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["LinkProber", "PIECES"]

PIECES = 16


@dataclass
class _Flow:
    first_at: float = 0.0
    last_at: float = 0.0
    bytes_after_first: int = 0
    pieces: int = 0


@dataclass
class LinkProber:
    """Receiver side of the start-up measurement at one DC (exists from the start, so no
    piece is lost; :meth:`start` when the scheduler's request arrives)."""

    peers: tuple                       # the DCs whose probes this DC expects
    started_at: float | None = None    # None until the scheduler asked this DC
    timeout_s: float = 0.0
    reported: bool = False
    flows: dict = field(default_factory=dict)

    def start(self, now: float, timeout_s: float) -> None:
        self.started_at, self.timeout_s = now, timeout_s

    @staticmethod
    def pieces(probe_bytes: int) -> list:
        """The payloads one sender sends to each peer (shared, never modified)."""
        size = max(1, probe_bytes // PIECES)
        piece = np.zeros(size, dtype=np.uint8)
        return [piece] * PIECES

    def on_piece(self, source: str, nbytes: int, now: float) -> None:
        flow = self.flows.setdefault(source, _Flow())
        if flow.pieces == 0:
            flow.first_at = now
        else:
            flow.bytes_after_first += nbytes
        flow.last_at = now
        flow.pieces += 1

    def done(self, now: float) -> bool:
        """Started and either every peer's flow is complete or the timeout passed."""
        if self.started_at is None:
            return False
        complete = all(self.flows.get(p, _Flow()).pieces >= PIECES for p in self.peers)
        return complete or now - self.started_at >= self.timeout_s

    def take_report(self, now: float):
        """The rates to report (:meth:`rates_mbps`) once :meth:`done`, exactly once; else
        None."""
        if self.reported or not self.done(now):
            return None
        self.reported = True
        return self.rates_mbps()

    def rates_mbps(self) -> dict:
        """Measured rate of every peer's flow into this DC, Mbit/s (0: nothing usable)."""
        rates = {}
        for peer in self.peers:
            flow = self.flows.get(peer)
            if flow is None or flow.pieces < 2 or flow.last_at <= flow.first_at:
                rates[peer] = 0.0
            else:
                rates[peer] = 8 * flow.bytes_after_first / (flow.last_at - flow.first_at) / 1e6
        return rates
