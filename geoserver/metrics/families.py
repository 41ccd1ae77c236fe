"""Building Prometheus metric families for custom collectors: every series of a process
carries its ``role`` (and ``dc``) labels, a family is only emitted when it has a sample.
Pure; O(samples)."""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["Families", "link_name"]


def link_name(src: str, dst: str) -> str:
    """The ``link`` label of the direction ``src -> dst``: ``"src->dst"``."""
    return f"{src}->{dst}"


class Families:
    """The families of one scrape. ``base``: the labels every series carries (e.g.
    ``{"role": "server", "dc": "eu"}``)."""

    def __init__(self, base: dict):
        self.base = dict(base)
        self._families: dict = {}

    def _family(self, kind, name: str, text: str, labels: tuple):
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = kind(name, text,
                                                 labels=[*self.base, *labels])
        return family

    def gauge(self, name: str, text: str, value, **labels) -> None:
        """One gauge sample (skipped when ``value`` is None)."""
        if value is not None:
            self._family(GaugeMetricFamily, name, text, tuple(labels)).add_metric(
                [*map(str, self.base.values()), *map(str, labels.values())], float(value))

    def counter(self, name: str, text: str, value, **labels) -> None:
        """One counter sample (``name`` without ``_total``; skipped when ``value`` is
        None)."""
        if value is not None:
            self._family(CounterMetricFamily, name, text, tuple(labels)).add_metric(
                [*map(str, self.base.values()), *map(str, labels.values())], float(value))

    def all(self) -> list:
        return list(self._families.values())
