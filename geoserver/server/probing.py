"""A DC server's part in the scheduler's link measurement (PROBE_REQUEST, PROBE,
PROBE_REPORT): stream probe pieces to every other DC at once, time what arrives here
(:class:`~netstorm.geoserver.server.wan.probe.LinkProber`) and report the inbound rates.

The pieces also feed the WAN transport's passive measurement. O(pieces) per request, O(1)
per piece received.
"""
from __future__ import annotations

import logging
import time

from ..config.settings import ProbeRequest, SettingsError
from ..core.postoffice import AbortError
from ..core.wire import Kind, Message
from .wan.probe import LinkProber

__all__ = ["Probing"]

log = logging.getLogger("netstorm.server")


class Probing:
    """Answers the scheduler's probe requests for one DC's server."""

    def __init__(self, dc: str, peers, wan, po):
        """``peers``: the other DCs; ``wan``: the server's WAN transport."""
        self.dc, self.wan, self.po = dc, wan, po
        self.prober = LinkProber(tuple(peers))

    def on_request(self, msg: Message) -> None:
        """Stream probe pieces to every other DC at once and time what arrives here."""
        try:
            request = ProbeRequest.from_json(msg.meta)
        except SettingsError as exc:
            raise AbortError(f"{self.dc}: bad PROBE_REQUEST from the scheduler: {exc}") from exc
        self.prober.start(time.monotonic(), request.timeout_s)
        for piece in LinkProber.pieces(request.probe_bytes):   # interleaved: all flows
            for dc in self.prober.peers:                        # run together
                self.wan.send(dc, Message(Kind.PROBE, dtype=piece.dtype, frames=[piece]))
        self.maybe_report()

    def on_piece(self, source: str, msg: Message) -> None:
        """A probe piece from ``source``'s server."""
        now = time.monotonic()
        self.prober.on_piece(source, sum(len(f) for f in msg.frames), now)   # start-up
        self.wan.on_probe(source, msg, now)                 # and passive measurement
        self.maybe_report()

    def maybe_report(self) -> None:
        """Send the report once every flow is measured or the measurement timed out."""
        rates = self.prober.take_report(time.monotonic())
        if rates is not None:
            log.info("%s: measured inbound rates (Mbit/s): %s", self.dc,
                     {k: round(v, 1) for k, v in rates.items()})
            self.po.send_scheduler(Message(Kind.PROBE_REPORT, meta={"rates": rates}))
