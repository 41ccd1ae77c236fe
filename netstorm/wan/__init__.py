"""The emulated WAN: network namespaces joined by tc-shaped links, on one machine.

* :mod:`.emulator`: :class:`EmulatedWan`, one run (namespaces, veths, shapers, routes);
* :mod:`.netns`: the ``ip``/``tc`` commands and namespace clean-up (:func:`down_all`);
* :mod:`.trace_runner`: :class:`TraceRunner`, a rate trace replayed on a run;
* :mod:`.builtin`: the built-in topologies (package data) and :func:`load_topology`;
* :mod:`.topology_file`: the topology file format; :mod:`.traces`: rate traces;
* :mod:`.routes`: the IP routes between DCs; :mod:`.cli`: ``scripts/wan.py``;
* :mod:`.counters`: :class:`LinkCounters`, per-link byte counters cheap enough to sample.
"""
from .builtin import BUILTINS, load_topology
from .counters import LinkCounters
from .emulator import EmulatedWan
from .netns import WanError, WanUnavailable, down_all, list_netns
from .trace_runner import AppliedChange, TraceRunner
from .traces import load_trace, mean_rates, rates_at

__all__ = ["AppliedChange", "BUILTINS", "EmulatedWan", "LinkCounters", "TraceRunner", "WanError",
           "WanUnavailable", "down_all", "list_netns", "load_topology", "load_trace",
           "mean_rates", "rates_at"]
