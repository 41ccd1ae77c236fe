"""Samples the emulated WAN's per-link byte counters (and the rates in force) every
``period_s`` in a background thread, for :mod:`netstorm.bench.link_table`.

One sample is ``(monotonic seconds, {(a, b): bytes sent so far}, {(a, b): Mbit/s})``; the
rates dict is shared between samples while it does not change (a rate trace changes it).
Reading is :class:`netstorm.wan.counters.LinkCounters`: one ``read`` of ``/proc/net/dev``
per DC, ~0.1 ms each, so 50 ms costs the machine well under 1% of a core.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

__all__ = ["LinkSampler", "SAMPLE_PERIOD_S", "read_samples", "write_samples"]

SAMPLE_PERIOD_S = 0.05


class LinkSampler:
    """A context manager: samples ``read()`` (``{(a, b): bytes}``) and ``rates()``
    (``{(a, b): Mbit/s}``) every ``period_s`` from entry to exit, and once at each end.
    ``samples`` holds them, oldest first."""

    def __init__(self, read, rates, period_s: float = SAMPLE_PERIOD_S, clock=time.monotonic):
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s!r}")
        self._read, self._rates, self._clock = read, rates, clock
        self.period_s = period_s
        self.samples: list = []
        self.errors = 0
        self._last_rates = None

    def _sample(self) -> None:
        try:
            counts = self._read()
            rates = self._rates()
        except Exception:           # noqa: BLE001  (a namespace torn down under us)
            self.errors += 1
            return
        if rates != self._last_rates:
            self._last_rates = rates
        self.samples.append((self._clock(), counts, self._last_rates))

    def _run(self) -> None:
        next_at = self._clock()
        while True:
            next_at += self.period_s
            if self._stop.wait(max(0.0, next_at - self._clock())):
                return
            self._sample()

    def __enter__(self) -> "LinkSampler":
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="link-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def write_samples(samples: list, path) -> None:
    """``samples`` as JSON lines (``{"t", "bytes": {"a->b": n}, "mbps": {"a->b": x}}``), for
    looking at a link's time line after the run (the bench keeps them beside its logs)."""
    with open(path, "w") as f:
        for t, counts, rates in samples:
            f.write(json.dumps({"t": t, "bytes": {f"{a}->{b}": n for (a, b), n in
                                                  counts.items()},
                                "mbps": {f"{a}->{b}": x for (a, b), x in
                                         (rates or {}).items()}}) + "\n")


def read_samples(path) -> list:
    """What :func:`write_samples` wrote, as samples again."""
    def pairs(d):
        return {tuple(k.split("->", 1)): v for k, v in d.items()}
    return [(row["t"], pairs(row["bytes"]), pairs(row["mbps"]))
            for row in map(json.loads, Path(path).read_text().splitlines())]
