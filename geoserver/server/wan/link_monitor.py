"""Passive throughput measurement of WAN links, from the training traffic itself.

No probes compete with training and no clocks are compared. The *sender* knows whether a link was
busy: a message that had to wait in its :class:`~netstorm.geoserver.server.wan.send_queue.SendQueue`
(ZeroMQ's queue towards that peer was full when it was queued) is marked ``Flag.QUEUED``, and from
then until it leaves the link carries nothing but the messages queued ahead of it and then this one.
The *receiver* timestamps arrivals with its own clock: for a QUEUED message, the time since the
previous arrival from the same peer is time the link spent carrying that message. Summing bytes and
those intervals over a window of at least ``window_s`` gives a rate; the receiver's scheduling
jitter moves single arrivals but cancels over a window. A message that was not QUEUED ends the
window (the link may have been idle before it); a window that ends so but carried at least
``min_bytes`` (a probe burst on an idle link) still counts. Windows feed an exponentially weighted
mean with time constant ``tau_s`` in continuous time: a window ending d seconds after the last
update weighs 1 - exp(-d/tau), so back-to-back windows weigh by their length, and a probe burst
seconds after the last news nearly replaces the estimate (after a silence of 4 tau it does). Each
window enters the mean as the median of itself and the two windows before it (when those are
recent): a single slow window (the sending server busy elsewhere for a moment, on a loaded host)
does not move the estimate, a real change does one window later. Before a link's first window, the
rate the scheduler planned with stands for the two before it, so a link's first window alone does
not replace the planned rate either.

A receiver that pauses (descheduled, or busy with an optimizer step on a loaded host)
finds on its return what the link delivered meanwhile waiting in its socket buffers, and
reads it back to back: intervals of microseconds that no link produced. So no message
counts as faster than ``max_rise`` times the link's rate as known (the current estimate,
else the rate the scheduler planned with): its interval is stretched to what it would take
at that rate. A drained burst then reads as at most ``max_rise`` times the link, and the
median of three windows keeps one such window out of the estimate; a real rise is followed
by ``max_rise`` per window.

A receiver that falls behind (another message already waits for it when it takes one: it is
busy summing, or shares a loaded host) limits the link to its own reading rate, through TCP
flow control: the link delivers what the receiver can read, and reads as slow as the
receiver; and when the receiver catches up it drains its buffers, which reads faster than
the link. So a window during which the receiver was behind is no measurement of the link:
it leaves the estimate as it is, and the estimate ages (its age is reported with it): a
slow reading confirms nothing, and a fast one may be a drain after a drop, which would
keep a stale estimate looking fresh. A link that really slows down stops the receiver from
being behind, and its windows then count in full.

A link that carries little (never backlogged) yields no samples, except from the small
probe bursts a server sends over links idle for a while
(:meth:`netstorm.geoserver.server.wan.transport.WanTransport.probe_idle`). A link that stops moving
entirely yields no arrivals either; the sender notices that (:meth:`SendQueue.stalled`).

Pure logic (the server feeds arrivals); O(1) per arrival.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["LinkMonitor", "MAX_RISE"]

MAX_RISE = 2.0      # no message counts as faster than this times its link's known rate


@dataclass
class _Link:
    last_arrival: float | None = None
    window_bytes: int = 0
    window_s: float = 0.0
    window_behind: bool = False     # the receiver was behind during this window
    mbps: float | None = None
    updated_at: float | None = None
    samples: int = 0
    recent: list = field(default_factory=list)     # the last 3 windows: (end time, Mbit/s)
    received: int = 0               # bytes that arrived in all (the metrics)


class LinkMonitor:
    """Inbound rate estimates of one DC's WAN links, keyed by the sending DC."""

    def __init__(self, window_s: float = 0.5, tau_s: float = 1.5, min_bytes: int = 256 * 1024,
                 known: dict | None = None, max_rise: float = MAX_RISE):
        """``known``: ``{source: Mbit/s}`` the scheduler planned with (the reference before
        a link's first estimate)."""
        if not (window_s > 0 and tau_s > 0 and max_rise > 1):
            raise ValueError(f"window_s and tau_s must be > 0 and max_rise > 1, got "
                             f"{window_s}, {tau_s}, {max_rise}")
        self.window_s = window_s
        self.tau_s = tau_s
        self.min_bytes = min_bytes
        self.known = dict(known or {})
        self.max_rise = max_rise
        self.behind_windows = 0     # windows not counted: the receiver was behind
        self._links: dict = {}

    def on_arrival(self, source: str, nbytes: int, queued: bool, now: float,
                   behind: bool = False) -> None:
        """A message of ``nbytes`` from ``source`` arrived at ``now`` (this DC's clock);
        ``behind``: another message already waited for this DC when it took this one."""
        link = self._links.setdefault(source, _Link())
        link.received += nbytes
        previous, link.last_arrival = link.last_arrival, now
        if not queued or previous is None or now < previous:
            # the link may have idled: close the window; a short busy run (a probe burst)
            # still counts if it carried at least min_bytes
            if link.window_bytes >= self.min_bytes and previous is not None:
                self._sample(link, previous, source)
            link.window_bytes, link.window_s, link.window_behind = 0, 0.0, False
            return
        link.window_behind |= behind
        link.window_bytes += nbytes
        reference = link.mbps or self.known.get(source)
        least = 8 * nbytes / (self.max_rise * reference * 1e6) if reference else 0.0
        link.window_s += max(now - previous, least)     # no faster than max_rise x known
        if link.window_s >= self.window_s:
            self._sample(link, now, source)

    def _sample(self, link: _Link, now: float, source: str) -> None:
        if link.window_s <= 0:
            return
        raw = 8 * link.window_bytes / link.window_s / 1e6
        if link.window_behind and (link.mbps is not None or source in self.known):
            link.window_bytes, link.window_s, link.window_behind = 0, 0.0, False
            self.behind_windows += 1            # the receiver's pace, not the link's
            return
        if link.mbps is None and not link.recent and source in self.known:
            # the rate the scheduler planned with counts as two windows: a link's first
            # window alone (a retransmission timeout, a slow start) cannot replace it
            link.recent = [(now, self.known[source])] * 2
        link.recent = [(t, x) for t, x in link.recent[-2:] if now - t <= self.tau_s * 4]
        link.recent.append((now, raw))
        sample = sorted(x for _, x in link.recent)[1] if len(link.recent) == 3 else raw
        if link.mbps is None or now - link.updated_at > self.tau_s * 4:
            link.mbps = sample               # nothing recent to smooth with
        else:
            # continuous-time smoothing: the old estimate fades with the time since it was
            # made, so back-to-back windows weigh by their length and a sparse probe sample
            # (the only news in seconds) nearly replaces it
            weight = 1.0 - math.exp(-max(0.0, now - link.updated_at) / self.tau_s)
            link.mbps += weight * (sample - link.mbps)
        link.updated_at = now
        link.samples += 1
        link.window_bytes, link.window_s, link.window_behind = 0, 0.0, False

    def estimates(self, now: float) -> dict:
        """``{source: (mbps, age_s)}`` for every link measured so far."""
        return {src: (link.mbps, now - link.updated_at)
                for src, link in self._links.items() if link.mbps is not None}

    def received_bytes(self) -> dict:
        """``{source: bytes}`` that arrived from each source so far (the metrics' per-link
        bytes). O(links); it copies the table first, so another thread may call it."""
        return {src: link.received for src, link in list(self._links.items())}

    def report(self, now: float) -> dict:
        """The estimates as heartbeat meta: ``{source: [mbps, age_s]}`` (JSON-ready)."""
        return {src: [round(mbps, 3), round(age, 3)]
                for src, (mbps, age) in self.estimates(now).items()}
