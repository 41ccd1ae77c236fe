"""What a cluster file's fields and the launcher's flags may hold, one check for both edges.

A number field has a :class:`Bound` (:data:`BOUNDS`, by the name the file gives it): its
kind, finite, in a sane range (a time up to a day, a rate from 1 kbit/s to 10 Tbit/s, a
count the wire can address). The cluster file's reader checks a field with
:meth:`Bound.check`, naming the file and field; the launcher's flags parse through
:func:`flag_type`, the same bound, naming the flag (argparse says ``argument --timeout:``).
Names of DCs are ASCII (:func:`check_dc_name`), strings hold no control character
(:func:`check_strings`), and one host runs at most a few processes per core
(:func:`crowding`). Pure; each check is O(1) but :func:`check_strings`, O(size of the file).
The numbers themselves are in ``settings``, beside the defaults.
"""
from __future__ import annotations

import argparse
import math
import re
import unicodedata
from dataclasses import dataclass

from .settings import MAX_CHUNK_BYTES, MAX_DURATION_S, MAX_FRAME_BYTES, MAX_FUSE_LINGER_S, \
    MAX_LATENCY_MS, MAX_MBPS, MAX_NODES, MAX_REPLAN_THRESHOLD, MAX_RESTARTS, MIN_CHUNK_BYTES, \
    MIN_DURATION_S, MIN_MBPS, NODE_ID_BYTES, PROCESSES_PER_CORE

__all__ = ["BOUNDS", "Bound", "DC_NAME", "MAX_DCS", "MAX_NAME_CHARS", "MAX_STRING_CHARS",
           "MAX_WORKERS_PER_DC", "check_dc_name", "check_strings", "crowding", "flag_type",
           "node_count_problem", "port_range", "text_flag"]

MAX_NAME_CHARS = 64
DC_NAME = re.compile(r"[A-Za-z0-9_-]{1,%d}" % MAX_NAME_CHARS)   # ASCII only: no look-alikes
MAX_STRING_CHARS = 4096         # a path, a host, an ssh option: longer is not one
MAX_WORKERS_PER_DC = MAX_NODES - 2          # besides the scheduler and the DC's server
MAX_DCS = (MAX_NODES - 1) // 2              # each DC: a server and at least one worker


@dataclass(frozen=True)
class Bound:
    """A number field: ``kind`` (int or float), finite, in ``low``..``high`` (``above``:
    ``low`` itself excluded); ``unit`` is said with the range, ``note`` says why a value
    is refused where the range alone does not."""

    kind: type
    low: float
    high: float
    unit: str = ""
    above: bool = False
    note: str = ""

    def describe(self) -> str:
        """``a whole number in 1..100`` or ``a finite number in [0.001, 86400] s``."""
        if self.kind is int:
            return f"a whole number in {self.low}..{self.high}{self.unit}"
        return f"a finite number in {'(' if self.above else '['}{self.low:g}, " \
               f"{self.high:g}]{self.unit}"

    def problem(self, value) -> str:
        """Why ``value`` does not fit ("" if it does): ``must be ..., got ...``."""
        fits = not isinstance(value, bool) and isinstance(value, (int, float)) and \
            (self.kind is float or isinstance(value, int)) and math.isfinite(value) and \
            (value > self.low if self.above else value >= self.low) and value <= self.high
        return "" if fits else f"must be {self.describe()}, got {value!r}{self.note}"

    def check(self, value, label: str, error: type):
        """``value`` as ``kind`` if it fits; else ``error`` saying ``label must be ...``."""
        problem = self.problem(value)
        if problem:
            raise error(f"{label} {problem}")
        return self.kind(value)


_SECONDS = Bound(float, MIN_DURATION_S, MAX_DURATION_S, " s")
_MBPS = Bound(float, MIN_MBPS, MAX_MBPS, " Mbit/s")
_RESTARTS = Bound(int, 0, MAX_RESTARTS)
BOUNDS = {          # a cluster file's number fields, by name (the launcher's flags too)
    "port": Bound(int, 1, 65535, note=""),
    "server_port": Bound(int, 0, 65535, note=" (0: any free port)"),
    "scheduler_port": Bound(int, 1, 65535, note=": 0 (any free port) cannot be the "
                            "scheduler's: every node must know where to reach it"),
    "workers": Bound(int, 1, MAX_WORKERS_PER_DC),
    "dcs": Bound(int, 1, MAX_DCS),
    "chunk_bytes": Bound(int, MIN_CHUNK_BYTES, MAX_CHUNK_BYTES, " bytes"),
    "fuse_bytes": Bound(int, 0, MAX_FRAME_BYTES, " bytes", note=" (0: no fusion)"),
    "timeout_s": _SECONDS, "heartbeat_s": _SECONDS, "dead_after_s": _SECONDS,
    "stall_s": _SECONDS,
    "max_idle_s": Bound(float, 0.0, MAX_DURATION_S, " s", note=" (0: never)"),
    "detect_floor_s": Bound(float, 0.0, MAX_DURATION_S, " s",
                            note=" (0: a silent node is presumed dead after dead_after_s)"),
    "fuse_linger_s": Bound(float, 0.0, MAX_FUSE_LINGER_S, " s"),
    "replan_threshold": Bound(float, 0.0, MAX_REPLAN_THRESHOLD),
    "min_dwell_s": Bound(float, 0.0, MAX_DURATION_S, " s"),
    "mbps": _MBPS, "mbps_ab": _MBPS, "mbps_ba": _MBPS,
    "latency_ms": Bound(float, 0.0, MAX_LATENCY_MS, " ms"),
    "worker_restarts": _RESTARTS, "cluster_restarts": _RESTARTS, "server_restarts": _RESTARTS,
    "audit_every": Bound(int, 0, 1 << 20, note=" (0: off)"),   # [recovery] replica audit
    "scheduler_restarts": _RESTARTS,
    "min_dcs": Bound(int, 1, MAX_DCS),                     # [elastic] (scheduler/membership.py)
    "rejoins": _RESTARTS,                                  # [elastic]: departed DCs back
    "join_after_s": Bound(float, 0.0, MAX_DURATION_S, " s"),   # netstorm-launch --join-after
    "scale": Bound(float, 1e-4, 1e4, above=True),        # a factor on every link's rate
    "status_port": Bound(int, 1, 65535),                   # [status] (config/status.py)
    "status_total_steps": Bound(int, 1, 1 << 40),
    "status_samples_per_step": Bound(int, 1, 1 << 40),
}


def flag_type(field: str):
    """An argparse ``type=`` for a flag setting ``field``: the text parsed as the field's
    kind and checked against its :data:`BOUNDS` entry; argparse names the flag."""
    bound = BOUNDS[field]

    def parse(text: str):
        try:
            value = bound.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {bound.describe()}, got {text!r}") \
                from None
        problem = bound.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value
    parse.__name__ = field      # argparse says "invalid timeout_s value" if it gets there
    return parse


def text_flag(text: str) -> str:
    """An argparse ``type=`` for a flag holding a name or a path: no control character."""
    problem = _string_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def check_dc_name(name: str, where: str, error: type) -> str:
    """``name`` if it is a DC name: 1 to :data:`MAX_NAME_CHARS` ASCII letters, digits, ``-``
    or ``_`` (they name files, tables and namespaces; a Cyrillic ``е`` beside a Latin ``e``
    would be two DCs that look one). Else ``error`` naming ``where`` and the rule."""
    if DC_NAME.fullmatch(name):
        return name
    odd = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "-_"))})
    which = f" (it holds {', '.join(f'U+{ord(c):04X} {c!r}' for c in odd)})" if odd else ""
    raise error(f"{where}: DC name {name!r} must be 1 to {MAX_NAME_CHARS} ASCII letters, "
                f"digits, '-' or '_' ([A-Za-z0-9_-]){which}")


def _string_problem(text: str) -> str:
    """Why ``text`` cannot be a setting ("" if it can): a control character, or too long."""
    if len(text) > MAX_STRING_CHARS:
        return f"is {len(text)} characters long; at most {MAX_STRING_CHARS} are taken"
    for i, c in enumerate(text):
        if unicodedata.category(c) == "Cc":
            return (f"holds a control character (U+{ord(c):04X} at position {i}); names, "
                    f"hosts and paths may not")
    return ""


def _field_name(path: tuple, data: dict) -> str:
    """``[[dc]] #2 name``, ``[ssh] options[1]``, ``[scheduler] host``: a field's place."""
    top, rest = path[0], path[1:]
    if isinstance(data.get(top), list) and rest and isinstance(rest[0], int):
        head, rest = f"[[{top}]] #{rest[0] + 1}", rest[1:]
    elif isinstance(data.get(top), dict):
        head = f"[{top}]"
    else:
        head = repr(top)
    tail = ""
    for part in rest:
        tail += f"[{part}]" if isinstance(part, int) else f".{part}" if tail else f" {part}"
    return head + tail


def check_strings(data: dict, where: str, error: type) -> None:
    """Every string of the parsed TOML ``data``, table keys too, is one a setting may hold
    (:func:`_string_problem`); else ``error`` naming ``where`` and the field. O(size)."""
    stack = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                problem = _string_problem(key)
                if problem:
                    raise error(f"{where}: the key {key!r} of "
                                f"{_field_name(path, data) if path else 'the file'} {problem}")
                stack.append(((*path, key), item))
        elif isinstance(value, list):
            stack.extend(((*path, i), item) for i, item in enumerate(value))
        elif isinstance(value, str):
            problem = _string_problem(value)
            if problem:
                raise error(f"{where}: {_field_name(path, data)} {problem}")


def node_count_problem(dcs: int, workers: int) -> str:
    """Why a cluster of ``dcs`` DCs and ``workers`` workers in all cannot run ("" if it can):
    every node needs an id on the wire, and ids are :data:`NODE_ID_BYTES` bytes."""
    nodes = 1 + dcs + workers
    if nodes <= MAX_NODES:
        return ""
    return (f"{nodes} nodes (the scheduler, {dcs} DC server(s), {workers} worker(s)) are more "
            f"than the wire can address: node ids are {8 * NODE_ID_BYTES}-bit, at most "
            f"{MAX_NODES} nodes")


def crowding(processes: int, cores: int) -> str:
    """Why ``processes`` on one host with ``cores`` cores are too many to start without
    asking ("" if they are not): more than :data:`PROCESSES_PER_CORE` per core."""
    cores = max(1, cores)
    if processes <= PROCESSES_PER_CORE * cores:
        return ""
    return (f"{processes} processes on this host with {cores} core(s) is more than "
            f"{PROCESSES_PER_CORE} per core: they would mostly wait for each other (and for "
            f"memory)")


PORT_RANGE = re.compile(r"\s*([0-9]{1,5})\s*(?:-\s*([0-9]{1,5})\s*)?")   # "40000-40100", "40000"


def port_range(text: str, label: str, error: type, note: str = "",
               any_free: bool = False) -> tuple | None:
    """``"LOW-HIGH"`` or ``"N"`` as ``(low, high)``; None when ``text`` has neither form.
    A port outside 1..65535 (``note`` added) or a low above its high raises ``error``
    starting with ``label``; ``any_free``: ``0`` alone (``(0, 0)``: any free port) is
    taken. O(len(text))."""
    match = PORT_RANGE.fullmatch(text)
    if match is None:
        return None
    low, high = int(match[1]), int(match[2] or match[1])
    if any_free and (low, high) == (0, 0):
        return 0, 0
    for port in (low, high):
        if not 1 <= port <= 65535:
            raise error(f"{label}port {port} is outside 1..65535{note}")
    if low > high:
        raise error(f"{label}{low} is above {high}")
    return low, high
