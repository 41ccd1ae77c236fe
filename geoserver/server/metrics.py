"""What a DC server's ``/metrics`` shows (docs/operations.md), read from the server's
parts when Prometheus scrapes: a prometheus_client custom collector. Nothing is counted
for it on the data path but each inbound link's bytes (one addition per WAN message, in
the link monitor); everything else is a counter or a state the server keeps anyway.

A scrape runs on the endpoint's thread while the server's loop goes on: it copies each
table before it reads it, and a part caught changing (a table that grew during the copy)
is left out of that scrape rather than waited for. O(links + keys + workers) per scrape,
and O(model) with compression (the residuals' norm)."""
from __future__ import annotations

import logging
import math
import time

from ..core.metrics import Families, link_name

__all__ = ["DROP_LOGS", "ServerCollector"]

log = logging.getLogger("netstorm.server")

# the rate-limited logs whose lines say a message (or a part of one) was dropped, by the
# reason Prometheus shows: where the server keeps each (attribute paths from the server)
DROP_LOGS = {
    "refused": ("po", "_drops"),                    # roles: not from that node, too early
    "unexpected": ("_drops",),                      # a kind the server does not take there
    "wan_transport": ("wan", "_drops"),             # bad parts, relays beyond their hops
    "exchange": ("exchange", "_drops"),             # chunks the trees do not expect
    "native_exchange": ("plane", "drops"),          # the same, in the compiled data plane
    "store": ("store", "drops"),                    # totals and shared memory refused
    "recovery": ("recovery", "_drops"),             # replica messages nobody asked for
    "bulk": ("po", "van", "bulk", "_bad"),          # bulk-channel frames that fail to open
}


def _part(obj, path: tuple):
    for name in path:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


class ServerCollector:
    """The collector of one DC's server; it shows nothing until :meth:`attach` gives it
    the :class:`~netstorm.geoserver.server.geoserver.GeoServer` (built after
    registration, while the endpoint already runs)."""

    def __init__(self, dc: str, clock=time.monotonic):
        self.dc = dc
        self.clock = clock
        self.server = None

    def attach(self, server) -> None:
        self.server = server

    def collect(self):
        server = self.server
        if server is None:
            return []
        out = Families({"role": "server", "dc": self.dc})
        for part in (self._rounds, self._links, self._sent, self._drops, self._waits,
                     self._steps, self._compression):
            try:
                part(server, out)
            except RuntimeError as exc:      # a table changed size while it was copied
                log.debug("%s: metrics: %s left out of this scrape: %s", self.dc,
                          part.__name__, exc)
        return out.all()

    def _rounds(self, server, out: Families) -> None:
        out.gauge("netstorm_round", "the latest WAN round this DC's workers pushed for",
                  server.store.max_round)
        out.gauge("netstorm_model_bytes", "bytes of every key this DC holds (the model)",
                  server.store.model_bytes())
        out.counter("netstorm_messages", "messages this server handled",
                    server.stats["messages"])

    def _links(self, server, out: Families) -> None:
        monitor = server.wan.monitor
        for src, nbytes in monitor.received_bytes().items():
            out.counter("netstorm_link_bytes", "bytes that crossed the link (wire size), "
                        "counted where they arrived", nbytes, link=link_name(src, self.dc))
        for src, (mbps, age) in monitor.estimates(server.wan.clock()).items():
            link = link_name(src, self.dc)
            out.gauge("netstorm_link_estimate_mbps", "this server's passive estimate of "
                      "the inbound link's rate, Mbit/s", mbps, link=link)
            out.gauge("netstorm_link_estimate_age_seconds", "how old that estimate is",
                      age, link=link)

    def _sent(self, server, out: Families) -> None:
        sent = dict(server.exchange.sent)
        out.counter("netstorm_wan_chunks_sent", "chunks this DC sent along the trees",
                    sent.get("chunks"))
        out.counter("netstorm_wan_chunk_bytes_sent", "payload bytes of those chunks",
                    sent.get("bytes"))

    def _drops(self, server, out: Families) -> None:
        dropped = {"malformed": getattr(server.po.van, "dropped", None)}
        for reason, path in DROP_LOGS.items():
            ratelog = _part(server, path)
            if ratelog is not None:
                dropped[reason] = ratelog.count
        for reason, count in dropped.items():
            out.counter("netstorm_dropped_messages", "messages dropped (each also logged, "
                        "rate-limited), by reason", count, reason=reason)

    def _waits(self, server, out: Families) -> None:
        gate = server.gate
        if gate.enabled:
            out.counter("netstorm_round_gate_waits", "rounds whose first push waited for "
                        "the scheduler to open them", gate.waits)
            out.counter("netstorm_round_gate_wait_seconds", "how long they waited",
                        gate.waited_s)
        mixed = server.mixed
        if mixed is not None:
            out.gauge("netstorm_staleness_max_rounds", "mixed: the largest staleness an "
                      "applied update had, rounds", mixed.staleness_seen)
            out.counter("netstorm_mixed_waits", "mixed: rounds of a key whose answer "
                        "waited for a slower DC", mixed.waits)

    def _steps(self, server, out: Families) -> None:
        balancer = server.balancer
        if balancer is None:
            return
        nodes = dict(server.table.nodes)
        for worker, seconds in dict(balancer.step_s).items():
            node = nodes.get(worker)
            out.gauge("netstorm_worker_step_seconds", "esync: a worker's measured seconds "
                      "per local step (its compute)", seconds,
                      rank=node.rank if node is not None else "")

    def _compression(self, server, out: Families) -> None:
        feedback = getattr(getattr(server.exchange, "codec", None), "feedback", None)
        if feedback is not None:
            norm = feedback.residual_norm()
            if math.isfinite(norm):
                out.gauge("netstorm_compression_residual_norm", "L2 norm of this DC's "
                          "error-feedback residuals (mass compression delayed)", norm)
