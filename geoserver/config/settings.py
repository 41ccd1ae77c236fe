"""The runtime settings the scheduler hands to every node, typed, with every default once.

The cluster file is read once, by the scheduler, into
:class:`~netstorm.geoserver.config.cluster.ClusterConfig` (whose fields default to the constants
below); the scheduler builds one :class:`RuntimeSettings` from it
(:meth:`RuntimeSettings.from_cluster`) and sends it in every WELCOME as JSON
(:meth:`RuntimeSettings.to_json`). A node decodes it back into the same type
(:meth:`RuntimeSettings.from_json`) and trusts nothing before that: a missing or unknown field,
a wrong type or a value out of range raises :class:`SettingsError` naming the field. A start-up
measurement's request (:class:`ProbeRequest`) travels the same way.
"""
from __future__ import annotations

import math
import struct
from dataclasses import asdict, dataclass, field, fields, replace

from .compression import CompressionConfig, CompressionError
from .sync import SyncConfig, SyncError

__all__ = ["CURVE_FRAME_OVERHEAD", "DATAPLANES", "DEFAULT_CHUNK_BYTES", "DEFAULT_DEAD_AFTER_S",
           "DEFAULT_FUSE_BYTES", "DEFAULT_FUSE_LINGER_S", "DEFAULT_HEARTBEAT_S", "DEFAULT_STALL_S",
           "DEFAULT_TIMEOUT_S", "IDLE_PROBE_S", "LOG_INTERVAL_S", "LOG_LINES_PER_PEER",
           "MAX_CHUNK_BYTES", "MAX_DURATION_S", "MAX_EARLY_MESSAGES", "MAX_FRAME_BYTES",
           "MAX_FUSE_LINGER_S", "MAX_HELD_BYTES_PER_PEER", "MAX_LATENCY_MS", "MAX_MBPS",
           "MAX_NODES", "MAX_PROBE_BYTES", "MAX_REPLAN_THRESHOLD", "MAX_RESTARTS",
           "MAX_ROUNDS_AHEAD", "MIN_CHUNK_BYTES", "MIN_DURATION_S", "MIN_MBPS", "NODE_ID_BYTES",
           "NO_NODE_ID", "PROBE_BYTES", "PROBE_TIMEOUT_S", "PROCESSES_PER_CORE", "ProbeRequest",
           "RuntimeSettings", "SettingsError", "TYPED"]

DEFAULT_CHUNK_BYTES = 1 << 18   # tensors larger than this travel as several WAN chunks
                                # (256 KiB: a chunk is what each tree hop must receive
                                # before it forwards, so it sets the pipeline fill)
MIN_CHUNK_BYTES = 1024
DEFAULT_FUSE_BYTES = 1 << 16   # a worker's requests of smaller keys (and every pull) wait a
                                # moment for others and travel with them in one message
DEFAULT_FUSE_LINGER_S = 0.001   # that moment (0: until the worker's I/O thread, woken by
                                # the first request, next looks); docs/kvstore.md, Fusion
MAX_FUSE_LINGER_S = 1.0
DATAPLANES = ("auto", "native", "python")   # [transport] dataplane (docs/dataplane.md)
DEFAULT_TIMEOUT_S = 60.0        # how long any node waits for a peer before a clear error
DEFAULT_HEARTBEAT_S = 0.5       # how often every node tells the scheduler it is alive
                                # (and the scheduler every node)
DEFAULT_DEAD_AFTER_S = 10.0     # a node (or the scheduler) silent this long is presumed dead
DEFAULT_AUDIT_EVERY = 10       # [recovery] audit_every: rounds between replica digests (0: off;
                                # docs/recovery-audit.md)
DEFAULT_DETECT_FLOOR_S = 1.0    # a node heard regularly is presumed dead after this much
                                # silence at least (learnt from its gaps and round trip,
                                # dead_after_s at most; 0: after dead_after_s; core/failure_detector.py)
DEFAULT_STALL_S = 3.0           # a WAN link moving nothing this long while data waits stalls
IDLE_PROBE_S = 5.0              # adapt: a link not timed this long gets a probe burst
PROBE_BYTES = 2 << 20           # start-up measurement, per directed pair: enough to leave
                                # TCP slow start at WAN rates
PROBE_TIMEOUT_S = 6.0           # a start-up measurement never takes longer than this
MAX_PROBE_BYTES = 1 << 28       # the most a PROBE_REQUEST may ask for, per directed pair

# Limits on what a node accepts from the network (docs/security.md, "Message validation").
MAX_FRAME_BYTES = 1 << 30       # ZeroMQ MAXMSGSIZE of every ROUTER: the largest frame taken;
                                # a worker's PUSH/INIT/VALUE of a whole key is one frame
CURVE_FRAME_OVERHEAD = 33       # bytes CURVE adds to every frame on the wire (its command
                                # name, nonce, MAC and flags): a ROUTER's MAXMSGSIZE allows
                                # them on top, or a frame of the largest size would cost its
                                # sender the connection
MAX_LATENCY_MS = 10_000.0       # a link's one-way delay above 10 s is a typo, not a WAN
MAX_ROUNDS_AHEAD = 64           # a chunk (or a gated push) of a round further ahead of this
                                # DC's own progress is dropped
MAX_HELD_BYTES_PER_PEER = 1 << 30   # tensor bytes kept for later per peer DC (partial sums
                                    # waiting for this DC, unknown policy versions, parts)
MAX_EARLY_MESSAGES = 1 << 16    # messages kept before the WELCOME or the first policy
LOG_LINES_PER_PEER = 10         # lines about bad messages per peer and interval, the rest
LOG_INTERVAL_S = 10.0           # counted and reported with the next line

# Limits on what a cluster file or a command line may set (config.limits checks them).
MIN_DURATION_S = 0.001          # a time setting under 1 ms (a heartbeat, a timeout) floods
                                # or fails a healthy cluster
MAX_DURATION_S = 86_400.0       # one over a day is a typo (and 1e308 s overflows the clocks)
MIN_MBPS = 1e-3                 # a link's rate, Mbit/s: from 1 kbit/s ...
MAX_MBPS = 1e7                  # ... to 10 Tbit/s
MAX_REPLAN_THRESHOLD = 10.0     # adapt: "predicted 1000% slower" is the most a switch waits for
MAX_RESTARTS = 100              # [recovery]: restarts of one process, or of the cluster
MAX_CHUNK_BYTES = MAX_FRAME_BYTES   # a WAN chunk travels as one frame
NODE_ID_BYTES = struct.calcsize("<H")   # a node id on the wire: the header's sender field
                                        # (core/wire.py HEADER; a test checks they agree)
NO_NODE_ID = (1 << 8 * NODE_ID_BYTES) - 1   # its largest value means "no id yet" (NO_NODE)
MAX_NODES = NO_NODE_ID          # ids 0 .. NO_NODE_ID - 1, given in turn: the scheduler, one
                                # server per DC, every worker (scheduler/registration.py)
PROCESSES_PER_CORE = 10         # more on one host than this per core needs the launcher's --yes
                                # (a 9-DC emulated WAN, 19 processes, runs on 2 cores)


TYPED = {"compression": CompressionConfig, "sync": SyncConfig}   # fields with a type of
                                                                # their own, JSON both ways


class SettingsError(ValueError):
    """Settings received from the wire are unusable; the text names the field."""


def _setting(default, kind: type, minimum=None, positive: bool = False, maximum=None):
    """A field of ``kind`` (int, float or bool) with its range: ``>= minimum``, or ``> 0``,
    and ``<= maximum``."""
    return field(default=default, metadata={"kind": kind, "minimum": minimum,
                                            "positive": positive, "maximum": maximum})


def _number(name: str, value, kind: type, minimum, positive: bool, maximum=None):
    if kind is bool:
        if not isinstance(value, bool):
            raise SettingsError(f"{name} must be true or false, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            kind is int and not isinstance(value, int):
        raise SettingsError(f"{name} must be {'an integer' if kind is int else 'a number'}, "
                            f"got {value!r}")
    if not math.isfinite(value):
        raise SettingsError(f"{name} must be finite, got {value!r}")
    if positive and not value > 0:
        raise SettingsError(f"{name} must be > 0, got {value!r}")
    if minimum is not None and value < minimum:
        raise SettingsError(f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise SettingsError(f"{name} must be <= {maximum}, got {value!r}")
    return kind(value)


def _links(value) -> tuple:
    """``[[a, b, Mbit/s a->b, Mbit/s b->a], ...]`` -> a tuple of such tuples."""
    if not isinstance(value, (list, tuple)):
        raise SettingsError(f"links must be a list, got {value!r}")
    links = []
    for i, link in enumerate(value):
        where = f"links[{i}]"
        if not isinstance(link, (list, tuple)) or len(link) != 4:
            raise SettingsError(f"{where} must be [a, b, mbps_ab, mbps_ba], got {link!r}")
        a, b = link[:2]
        if not (isinstance(a, str) and isinstance(b, str) and a and b and a != b):
            raise SettingsError(f"{where} must name two different DCs, got {link!r}")
        links.append((a, b, _number(f"{where} mbps_ab", link[2], float, None, True, MAX_MBPS),
                      _number(f"{where} mbps_ba", link[3], float, None, True, MAX_MBPS)))
    return tuple(links)


def _decode(cls, data, what: str) -> dict:
    """The validated constructor arguments of ``cls`` from the JSON object ``data``."""
    if not isinstance(data, dict):
        raise SettingsError(f"{what}: expected an object, got {type(data).__name__}")
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(data) - set(names), key=str)
    if unknown:
        raise SettingsError(f"{what}: unknown field {unknown[0]!r}")
    kwargs = {}
    try:
        for f in fields(cls):
            if f.name not in data:
                raise SettingsError(f"missing field {f.name!r}")
            if f.name == "links":
                kwargs[f.name] = _links(data[f.name])
            elif f.name == "checkpoint":
                value = data[f.name]
                if not isinstance(value, str) or len(value) > 4096:
                    raise SettingsError(f"{f.name} must be a path (a string), got {value!r}")
                kwargs[f.name] = value
            elif f.name == "dataplane":
                if data[f.name] not in DATAPLANES:
                    raise SettingsError(f"dataplane must be one of {', '.join(DATAPLANES)}, "
                                        f"got {data[f.name]!r}")
                kwargs[f.name] = data[f.name]
            elif f.name in TYPED:
                try:
                    kwargs[f.name] = TYPED[f.name].from_json(data[f.name])
                except (CompressionError, SyncError) as exc:
                    raise SettingsError(f"{f.name}: {exc}") from None
            else:
                kwargs[f.name] = _number(f.name, data[f.name], f.metadata["kind"],
                                         f.metadata["minimum"], f.metadata["positive"],
                                         f.metadata["maximum"])
    except SettingsError as exc:
        raise SettingsError(f"{what}: {exc}") from None
    return kwargs


class _Wire:
    """Encoding shared by the settings types: a JSON object with one entry per field."""

    def to_json(self) -> dict:
        data = asdict(self)
        if "links" in data:
            data["links"] = [list(link) for link in data["links"]]
        return data

    @classmethod
    def from_json(cls, data):
        return cls(**_decode(cls, data, cls.__name__))


@dataclass(frozen=True)
class RuntimeSettings(_Wire):
    """What every server and worker is told at rendezvous (WELCOME) about how to run."""

    chunk_bytes: int = _setting(DEFAULT_CHUNK_BYTES, int, minimum=MIN_CHUNK_BYTES,
                                maximum=MAX_CHUNK_BYTES)
    timeout_s: float = _setting(DEFAULT_TIMEOUT_S, float, positive=True,
                                maximum=MAX_DURATION_S)
    fuse_bytes: int = _setting(DEFAULT_FUSE_BYTES, int, minimum=0,   # 0: no fusion
                               maximum=MAX_FRAME_BYTES)
    dataplane: str = field(default="auto")  # "auto" | "native" | "python" (docs/dataplane.md)
    fuse_linger_s: float = _setting(DEFAULT_FUSE_LINGER_S, float, minimum=0.0,
                                    maximum=MAX_FUSE_LINGER_S)
    heartbeat_s: float = _setting(DEFAULT_HEARTBEAT_S, float, positive=True,
                                  maximum=MAX_DURATION_S)
    dead_after_s: float = _setting(DEFAULT_DEAD_AFTER_S, float, positive=True,
                                   maximum=MAX_DURATION_S)
    detect_floor_s: float = _setting(DEFAULT_DETECT_FLOOR_S, float, minimum=0.0,
                                     maximum=MAX_DURATION_S)
    stall_s: float = _setting(DEFAULT_STALL_S, float, positive=True,
                              maximum=MAX_DURATION_S)
    probe_idle_s: float = _setting(0.0, float, minimum=0.0)   # 0: never probe idle links
    round_gate: bool = _setting(False, bool)    # adapt: a round starts once it is opened
    links: tuple = field(default=())            # the WAN the scheduler planned on, for
                                                # detours: ((a, b, mbps_ab, mbps_ba), ...)
    compression: CompressionConfig = field(default=CompressionConfig())   # cluster-wide
    sync: SyncConfig = field(default=SyncConfig())                     # cluster-wide
    resume: bool = _setting(False, bool)    # the servers start from a checkpoint
    server_restarts: int = _setting(0, int, minimum=0)  # a lost DC server is replaced:
                                            # workers keep their unconfirmed pushes
    scheduler_restarts: int = _setting(0, int, minimum=0)   # a silent scheduler is awaited
                                            # back (timeout_s), the data path running
    checkpoint: str = field(default="")    # where kv.save_checkpoint() writes by default
    audit_every: int = _setting(DEFAULT_AUDIT_EVERY, int, minimum=0)  # replica digests every
                                            # N rounds (0: off; docs/recovery-audit.md)
    min_dcs: int = _setting(0, int, minimum=0)     # [elastic]: policies may span a subset

    @classmethod
    def from_cluster(cls, config) -> "RuntimeSettings":
        """The settings of ``config`` (a ClusterConfig), without links (:meth:`with_links`
        adds the WAN once it is known). The round gate is on exactly when the scheduler
        re-plans (adapt, multi-root trees, several DCs); idle links are probed with adapt."""
        return cls(chunk_bytes=int(config.chunk_bytes), timeout_s=float(config.timeout_s),
                   fuse_bytes=int(config.fuse_bytes),
                   fuse_linger_s=float(config.fuse_linger_s), dataplane=config.dataplane,
                   heartbeat_s=float(config.heartbeat_s),
                   dead_after_s=float(config.dead_after_s), stall_s=float(config.stall_s),
                   detect_floor_s=float(config.detect_floor_s),
                   probe_idle_s=IDLE_PROBE_S if config.adapt else 0.0,
                   round_gate=config.adapt and config.policy == "fapt" and len(config.dcs) > 1,
                   compression=config.compression, sync=config.sync,
                   resume=bool(config.resume), checkpoint=config.checkpoint,
                   server_restarts=int(config.server_restarts),
                   audit_every=int(config.audit_every),
                   scheduler_restarts=int(config.scheduler_restarts),
                   min_dcs=int(config.min_dcs))

    def with_links(self, links) -> "RuntimeSettings":
        """These settings with the WAN planned on: ``links`` have ``a``, ``b``, ``mbps_ab``
        and ``mbps_ba``."""
        return replace(self, links=tuple((l.a, l.b, float(l.mbps_ab), float(l.mbps_ba))
                                         for l in links))

    def rates(self) -> dict:
        """``{(a, b): Mbit/s}`` of :attr:`links`, both directions."""
        rates = {}
        for a, b, ab, ba in self.links:
            rates[(a, b)], rates[(b, a)] = ab, ba
        return rates


@dataclass(frozen=True)
class ProbeRequest(_Wire):
    """The scheduler's PROBE_REQUEST: stream ``probe_bytes`` to every other server at once
    and report what arrived here within ``timeout_s``."""

    probe_bytes: int = _setting(PROBE_BYTES, int, minimum=1, maximum=MAX_PROBE_BYTES)
    timeout_s: float = _setting(PROBE_TIMEOUT_S, float, positive=True)
