"""Replaying a rate trace on an emulated WAN, recording when each change took effect."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .emulator import EmulatedWan
from .netns import WanError

__all__ = ["AppliedChange", "TraceRunner"]


@dataclass(frozen=True)
class AppliedChange:
    """One rate change as actually applied by a :class:`TraceRunner`."""
    t_s: float          # seconds since the runner started, when the change took effect
    wall_s: float       # time.time() at that moment, to line up with other processes' logs
    trace_t_s: float    # when the trace asked for it
    rates: dict         # {(a, b): mbps} set by this change



class TraceRunner:
    """A thread applying a trace's rate changes to ``wan`` at the trace's times.

    ``applied`` records every change as it took effect (:class:`AppliedChange`), so a
    benchmark can compare its bandwidth estimates with the truth (:meth:`rates_at`).
    """

    def __init__(self, wan: EmulatedWan, trace):
        self.wan = wan
        self.trace = sorted(trace, key=lambda item: item[0])
        self.applied = []
        self.error = None
        self._initial = wan.rates()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trace-runner", daemon=True)
        self.started = None

    def start(self) -> "TraceRunner":
        self.started = time.monotonic()
        self._thread.start()
        return self

    def _loop(self) -> None:
        try:
            for t_s, rates in self.trace:
                if self._stop.wait(max(0.0, self.started + t_s - time.monotonic())):
                    return
                self.wan.apply_rates(rates)
                self.applied.append(AppliedChange(time.monotonic() - self.started, time.time(),
                                                  t_s, dict(rates)))
        except Exception as exc:  # reported by stop()
            self.error = exc

    def done(self) -> bool:
        return self.started is not None and not self._thread.is_alive()

    def wait(self, timeout: float = None) -> bool:
        """Wait until every change is applied; True if finished."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop applying changes; re-raise an error the thread hit."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self.error is not None:
            raise WanError(f"trace runner failed: {self.error}") from self.error

    def rates_at(self, t_s: float) -> dict:
        """The true rates at ``t_s`` seconds after start (per :attr:`applied`)."""
        current = dict(self._initial)
        for change in list(self.applied):
            if change.t_s > t_s:
                break
            current.update(change.rates)
        return current

    def __enter__(self) -> "TraceRunner":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
