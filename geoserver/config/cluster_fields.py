"""The checks of one field of a cluster file: which fields each table may hold (``FIELDS``;
anything else is a typo, named with the closest known field), a required field of one type,
a number within its bound (``limits.BOUNDS``), a host address, and reading a TOML file.
Every failure is a :class:`~netstorm.geoserver.config.cluster_config.ClusterFileError` naming
the file and the field. Pure (a host name is resolved once, by ``hosts``); each check is
O(fields)."""
from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

from .cluster_config import ClusterFileError
from .hosts import reachable, resolve_host
from .limits import BOUNDS

__all__ = ["FIELDS", "MAX_FILE_BYTES", "advertise", "bounded", "host", "known_fields", "need",
           "read_toml"]

MAX_FILE_BYTES = 1 << 20    # a cluster file of a thousand DCs with their keys is ~200 KB

FIELDS = {     # what each table of a cluster file may hold; anything else is a typo
    "": ("scheduler", "dc", "transport", "wan", "link", "security", "compression", "sync",
         "ssh", "recovery", "emulation", "metrics", "status", "elastic"),
    "elastic": ("min_dcs", "rejoins"),
    "recovery": ("worker_restarts", "resume", "checkpoint", "cluster_restarts",
                 "server_restarts", "audit_every", "scheduler_restarts"),
    "scheduler": ("host", "advertise", "port", "stats"),
    "dc": ("name", "host", "advertise", "server_port", "workers", "worker_hosts",
           "worker_ports", "worker_advertise", "bulk_port"),
    "transport": ("chunk_bytes", "timeout_s", "heartbeat_s", "dead_after_s", "stall_s",
                  "fuse_bytes", "fuse_linger_s", "dataplane", "max_idle_s", "detect_floor_s"),
    "wan": ("policy", "hub", "adapt", "multipath", "replan_threshold", "min_dwell_s",
            "trees"),
    "link": ("a", "b", "mbps", "mbps_ab", "mbps_ba", "latency_ms"),
    "security": ("curve", "secret_keys", "scheduler_key", "dc_keys", "bulk_cipher"),
    "status": ("port", "host", "total_steps", "samples_per_step"),
}


def known_fields(table, kind: str, where: str) -> dict:
    """``table`` itself, once it is a table holding only the fields of ``kind``; an unknown
    field (a typo: ``polcy``, ``[transprt]``) is an error suggesting the closest known one."""
    if not isinstance(table, dict):
        raise ClusterFileError(f"{where}: must be a table, got {table!r}")
    for name in table:
        if name not in FIELDS[kind]:
            close = difflib.get_close_matches(name, FIELDS[kind], n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else \
                f"; known: {', '.join(FIELDS[kind])}"
            what = "table" if kind == "" else "field"
            raise ClusterFileError(f"{where}: unknown {what} {name!r}{hint}")
    return table


def need(table: dict, key: str, kind, where: str):
    """The field ``key`` of ``table``, present and of type ``kind`` (an int is taken as a
    float; a bool is never a number)."""
    if key not in table:
        raise ClusterFileError(f"{where}: missing field {key!r}")
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ClusterFileError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def bounded(table: dict, key: str, where: str, bound: str = ""):
    """The number field ``key`` of ``table``: present, of its kind, finite and within its
    bound (``limits.BOUNDS[bound or key]``); the error names ``where`` and ``key``."""
    limit = BOUNDS[bound or key]
    return limit.check(need(table, key, limit.kind, where), f"{where}: {key}",
                       ClusterFileError)


def host(value: str, where: str) -> str:
    return resolve_host(value, where, ClusterFileError)


def advertise(table: dict, bind: str, where: str) -> str:
    """A table's ``advertise`` address ("": peers reach it at its bind address)."""
    address = host(need(table, "advertise", str, where), where) \
        if "advertise" in table else ""
    reachable(bind, address, where, ClusterFileError)
    return address if address != bind else ""


def read_toml(path, error: type, what: str, hint: str = "") -> dict:
    """The TOML file ``path`` as a table; a file that cannot be read, is larger than
    :data:`MAX_FILE_BYTES`, is not UTF-8 or not valid TOML (nested too deeply included)
    raises ``error`` naming the file (``what`` says which kind of file, ``hint`` is added to
    a read error). O(size)."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}{hint}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise error(f"{path}: larger than {MAX_FILE_BYTES} bytes; not a {what}")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}); TOML files are UTF-8") \
            from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError:
        raise error(f"{path}: not valid TOML: arrays or tables nested too deeply") from None
