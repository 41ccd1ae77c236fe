"""The cluster file: one human-written TOML file describing a whole netstorm cluster.

Example (``docs/cluster.example.toml`` has the commented version)::

    [scheduler]
    host = "127.0.0.1"
    port = 9000

    [[dc]]
    name = "eu"
    host = "127.0.0.1"      # address the DC's server binds and workers use
    server_port = 9100      # 0: any free port, reported to the scheduler
    workers = 2

    [[dc]]
    name = "us"
    host = "127.0.0.1"
    server_port = 9101
    workers = 2

    [transport]             # every field optional (defaults: geoserver/config/settings.py)
    chunk_bytes = 262144    # tensors larger than this travel as several chunks
    timeout_s = 120         # how long any node waits for a peer before a clear error
    heartbeat_s = 0.25      # how often every node tells the scheduler it is alive
    dead_after_s = 5        # a node silent this long is declared dead: the run aborts
                            # (also the scheduler: every node then stops, naming it)
    stall_s = 2             # a WAN link that moves nothing this long while data waits
                            # is reported stalled (treated as failed; see adapt)
    fuse_bytes = 65536      # a worker's requests of smaller keys travel together (0: never)
    fuse_linger_s = 0.001   # how long the first of them waits for others

    [wan]
    policy = "fapt"         # fapt: multi-root aggregation trees; star: one global server
    hub = "eu"              # star centre; default: the first DC
    adapt = false           # fapt: re-plan the trees from rates measured on the traffic
    replan_threshold = 0.2  # adapt: switch when the current policy is predicted this much
                            # slower than the best one under fresh estimates
    min_dwell_s = 10        # adapt: at least this long between two switches
    multipath = false       # fapt: idle links carry part of busy links' chunks via relays
    trees = "split"         # fapt: "split" lets a tree's total descend a broadcast tree of
                            # its own when the time model predicts it faster; "shared":
                            # every tree broadcasts along its aggregation edges

    [[link]]                # optional: the WAN links and their rates (Mbit/s). If given,
    a = "eu"                # trees use only these links (relaying through DCs); without
    b = "us"                # them every pair of DCs is a candidate link and the rates are
                            # measured at start-up (a few seconds)
    mbps = 100              # or mbps_ab / mbps_ba for the two directions
    latency_ms = 40         # optional: one-way delay, for planning (the time model)

    [security]              # written by `netstorm-launch keygen FILE` (docs/security.md)
    curve = true            # false: no encryption, no authentication (logs a warning)
    secret_keys = "keys"    # this host's secret keys (relative to this file)
    scheduler_key = "..."   # the scheduler's public key (Z85)
    [security.dc_keys]
    eu = "..."              # each DC's public key, shared by its server and workers
    us = "..."

The file is read once, at the edge of each process, into the frozen :class:`ClusterConfig`
that is passed down; nothing deeper reads files or the environment. The settings servers and
workers need travel from the scheduler as one
:class:`~netstorm.geoserver.config.settings.RuntimeSettings`, whose defaults are this file's.
"""
from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from .compression import CompressionConfig, CompressionError
from .emulation import EmulationConfig, parse_emulation
from .hosts import SshConfig, parse_ssh, reachable, resolve_host
from .sync import SyncConfig, SyncError
from .keys import SCHEDULER_PRINCIPAL, SecurityConfig, SecurityError, check_key
from .settings import DEFAULT_CHUNK_BYTES, DEFAULT_DEAD_AFTER_S, DEFAULT_FUSE_BYTES, \
    DEFAULT_FUSE_LINGER_S, DEFAULT_HEARTBEAT_S, DEFAULT_STALL_S, DEFAULT_TIMEOUT_S, \
    MAX_FUSE_LINGER_S, MAX_LATENCY_MS, MIN_CHUNK_BYTES

POLICIES = ("star", "fapt")
TREE_KINDS = ("split", "shared")   # [wan] trees


class ClusterFileError(ValueError):
    """The cluster file is unusable; the message names the file and the field."""


@dataclass(frozen=True)
class DataCenter:
    """One DC: its server binds ``host`` and is reached at ``advertise`` ("": ``host``);
    its workers run on ``worker_hosts`` in turn ((): on the server's host)."""

    name: str
    host: str
    server_port: int
    workers: int
    advertise: str = ""
    worker_hosts: tuple = ()

    @property
    def server_host(self) -> str:
        """Where the server is reached (and runs, for ``launch.py --ssh``)."""
        return self.advertise or self.host

    def worker_host(self, index: int) -> str:
        """The host of worker ``index`` (0-based) of this DC: the address it binds, is
        reached at and runs on."""
        return self.worker_hosts[index % len(self.worker_hosts)] if self.worker_hosts \
            else self.server_host


@dataclass(frozen=True)
class LinkSpec:
    """A declared WAN link with its rate per direction, Mbit/s, and its one-way delay."""

    a: str
    b: str
    mbps_ab: float
    mbps_ba: float
    latency_ms: float = 0.0     # one-way delay, both ways (planning only)


@dataclass(frozen=True)
class ClusterConfig:
    scheduler_host: str
    scheduler_port: int
    dcs: tuple
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    dead_after_s: float = DEFAULT_DEAD_AFTER_S
    stall_s: float = DEFAULT_STALL_S
    fuse_bytes: int = DEFAULT_FUSE_BYTES
    fuse_linger_s: float = DEFAULT_FUSE_LINGER_S
    policy: str = "star"
    hub: str = ""
    adapt: bool = False
    replan_threshold: float = 0.2
    min_dwell_s: float = 10.0
    multipath: bool = False
    trees: str = "split"    # [wan] trees: "split" or "shared" (docs/policy.md)
    links: tuple = ()
    stats: str = ""         # scheduler: JSON-lines log of estimates and policies ("": none)
    security: SecurityConfig = SecurityConfig()
    compression: CompressionConfig = CompressionConfig()     # [compression]: MXNet's dict
    sync: SyncConfig = SyncConfig()     # [sync]: how rounds synchronize (docs/sync.md)
    scheduler_advertise: str = ""       # where nodes reach the scheduler ("": its host)
    worker_restarts: int = 0            # [recovery]: restarts of each worker (docs/recovery.md)
    resume: str = ""                    # [recovery]: checkpoint the servers start from
    checkpoint: str = ""                # [recovery]: where kv.save_checkpoint() writes
    cluster_restarts: int = 0           # [recovery]: whole-cluster restarts from it
    server_restarts: int = 0            # [recovery]: replacements of each DC's server
    ssh: SshConfig = SshConfig()        # [ssh]: how launch.py --ssh reaches every host
    emulation: EmulationConfig = EmulationConfig()  # [emulation]: emulated WAN delays only
    source: str = field(default="<built>", compare=False)

    def __post_init__(self):
        """Refuse settings that contradict each other (one value alone is checked where it
        is read): every node beats every ``heartbeat_s``, so a node declared dead after
        less than two beats' silence, or a wait for a peer shorter than two beats, would
        fail a healthy cluster."""
        beats = 2 * self.heartbeat_s
        for key in ("dead_after_s", "timeout_s"):
            if getattr(self, key) < beats:
                raise ClusterFileError(
                    f"{self.source}: {key} = {getattr(self, key):g} is below two heartbeats "
                    f"(heartbeat_s = {self.heartbeat_s:g}): a healthy node would be taken "
                    f"for dead; raise {key} to at least {beats:g} or lower heartbeat_s")
        if self.cluster_restarts and not self.checkpoint:
            raise ClusterFileError(f"{self.source}: [recovery] cluster_restarts needs "
                                   f"'checkpoint', the file the run restarts from")
        if self.server_restarts and self.compression.on:
            raise ClusterFileError(
                f"{self.source}: [recovery] server_restarts cannot run with [compression]: "
                f"a replayed round would meet error-feedback residuals that already hold "
                f"part of it (docs/recovery.md)")
        for name, on in (("worker_restarts", self.worker_restarts), ("resume", self.resume),
                         ("checkpoint", self.checkpoint),
                         ("server_restarts", self.server_restarts)):
            if on and self.sync.mode != "fsa":
                raise ClusterFileError(
                    f"{self.source}: [recovery] {name} needs [sync] mode 'fsa': under "
                    f"{self.sync.mode!r} the workers' own models and step counts are not "
                    f"on the servers (docs/recovery.md)")
        if self.sync.asynchronous:
            clash = [name for name, on in (("[wan] adapt", self.adapt),
                                           ("[wan] multipath", self.multipath),
                                           ("[compression]", self.compression.on)) if on]
            if clash:
                raise ClusterFileError(
                    f"{self.source}: [sync] mode 'mixed' cannot run with {clash[0]}: each DC's "
                    f"update goes straight to every other DC, off the trees, uncompressed and "
                    f"never relayed (docs/sync.md)")

    @property
    def scheduler_reached_at(self) -> str:
        """Where nodes reach the scheduler (and where it runs, for ``launch.py --ssh``)."""
        return self.scheduler_advertise or self.scheduler_host

    @property
    def scheduler_address(self) -> str:
        return f"tcp://{self.scheduler_reached_at}:{self.scheduler_port}"

    @property
    def num_workers(self) -> int:
        return sum(dc.workers for dc in self.dcs)

    @property
    def hub_dc(self) -> str:
        return self.hub or self.dcs[0].name

    def dc(self, name: str) -> DataCenter:
        for dc in self.dcs:
            if dc.name == name:
                return dc
        raise ClusterFileError(f"{self.source}: no DC named {name!r}; DCs are "
                               f"{[d.name for d in self.dcs]}")

    def with_scheduler_port(self, port: int) -> "ClusterConfig":
        return replace(self, scheduler_port=port)


FIELDS = {     # what each table of a cluster file may hold; anything else is a typo
    "": ("scheduler", "dc", "transport", "wan", "link", "security", "compression", "sync",
         "ssh", "recovery", "emulation"),
    "recovery": ("worker_restarts", "resume", "checkpoint", "cluster_restarts",
                 "server_restarts"),
    "scheduler": ("host", "advertise", "port", "stats"),
    "dc": ("name", "host", "advertise", "server_port", "workers", "worker_hosts"),
    "transport": ("chunk_bytes", "timeout_s", "heartbeat_s", "dead_after_s", "stall_s",
                  "fuse_bytes", "fuse_linger_s"),
    "wan": ("policy", "hub", "adapt", "multipath", "replan_threshold", "min_dwell_s",
            "trees"),
    "link": ("a", "b", "mbps", "mbps_ab", "mbps_ba", "latency_ms"),
    "security": ("curve", "secret_keys", "scheduler_key", "dc_keys"),
}


def _known_fields(table, kind: str, where: str) -> dict:
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


def _need(table: dict, key: str, kind, where: str):
    if key not in table:
        raise ClusterFileError(f"{where}: missing field {key!r}")
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ClusterFileError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _port(value: int, where: str) -> int:
    if not 0 <= value <= 65535:
        raise ClusterFileError(f"{where}: port {value} is outside 0..65535")
    return value


def _host(value: str, where: str) -> str:
    return resolve_host(value, where, ClusterFileError)


def parse_cluster(data: dict, source: str = "<dict>") -> ClusterConfig:
    """Validate a parsed cluster table; every problem names ``source`` and the field."""
    _known_fields(data, "", source)
    sched = data.get("scheduler")
    if not isinstance(sched, dict):
        raise ClusterFileError(f"{source}: missing [scheduler] table")
    where = f"{source} [scheduler]"
    _known_fields(sched, "scheduler", where)
    sched_host = _host(_need(sched, "host", str, where), where)
    sched_port = _port(_need(sched, "port", int, where), where)
    sched_advertise = _advertise(sched, sched_host, where)
    raw_dcs = data.get("dc")
    if not isinstance(raw_dcs, list) or not raw_dcs:
        raise ClusterFileError(f"{source}: no [[dc]] tables; a cluster needs at least one DC")
    dcs, seen = [], set()
    for i, raw in enumerate(raw_dcs):
        where = f"{source} [[dc]] #{i + 1}"
        name = _need(_known_fields(raw, "dc", where), "name", str, where)
        if not name or not name.replace("-", "").replace("_", "").isalnum():
            raise ClusterFileError(f"{where}: DC name {name!r} must be letters, digits, - or _")
        if name in seen:
            raise ClusterFileError(f"{where}: duplicate DC name {name!r}")
        seen.add(name)
        where = f"{source} DC {name!r}"
        workers = _need(raw, "workers", int, where)
        if workers < 1:
            raise ClusterFileError(f"{where}: workers must be >= 1, got {workers}")
        host = _host(_need(raw, "host", str, where), where)
        dcs.append(DataCenter(name=name, host=host,
                              server_port=_port(_need(raw, "server_port", int, where), where),
                              workers=workers, advertise=_advertise(raw, host, where),
                              worker_hosts=_worker_hosts(raw, workers, where)))
    bound = [(d.host, d.server_port) for d in dcs if d.server_port] + [(sched_host, sched_port)]
    if len(set(bound)) != len(bound):
        raise ClusterFileError(f"{source}: two processes are given the same host and port")
    where = f"{source} [transport]"
    transport = _known_fields(data.get("transport", {}), "transport", where)
    kwargs = {}
    if "chunk_bytes" in transport:
        kwargs["chunk_bytes"] = _need(transport, "chunk_bytes", int, where)
        if kwargs["chunk_bytes"] < MIN_CHUNK_BYTES:
            raise ClusterFileError(f"{where}: chunk_bytes must be >= {MIN_CHUNK_BYTES}")
    if "fuse_bytes" in transport:
        kwargs["fuse_bytes"] = _need(transport, "fuse_bytes", int, where)
        if kwargs["fuse_bytes"] < 0:
            raise ClusterFileError(f"{where}: fuse_bytes must be >= 0 (0: no fusion)")
    if "fuse_linger_s" in transport:
        kwargs["fuse_linger_s"] = _need(transport, "fuse_linger_s", float, where)
        if not 0 <= kwargs["fuse_linger_s"] <= MAX_FUSE_LINGER_S:
            raise ClusterFileError(f"{where}: fuse_linger_s must be in [0, "
                                   f"{MAX_FUSE_LINGER_S:g}]")
    if "stats" in sched:
        kwargs["stats"] = _need(sched, "stats", str, f"{source} [scheduler]")
    for key in ("timeout_s", "heartbeat_s", "dead_after_s", "stall_s"):
        if key in transport:
            kwargs[key] = _need(transport, key, float, where)
            if kwargs[key] <= 0:
                raise ClusterFileError(f"{where}: {key} must be > 0")
    where = f"{source} [wan]"
    wan = _known_fields(data.get("wan", {}), "wan", where)
    if "policy" in wan:
        kwargs["policy"] = _need(wan, "policy", str, where)
        if kwargs["policy"] not in POLICIES:
            raise ClusterFileError(f"{where}: unknown policy {kwargs['policy']!r}; "
                                   f"known: {', '.join(POLICIES)}")
    if "trees" in wan:
        kwargs["trees"] = _need(wan, "trees", str, where)
        if kwargs["trees"] not in TREE_KINDS:
            raise ClusterFileError(f"{where}: trees must be one of {', '.join(TREE_KINDS)}, "
                                   f"got {kwargs['trees']!r}")
    if "hub" in wan:
        kwargs["hub"] = _need(wan, "hub", str, where)
        if kwargs["hub"] not in seen:
            raise ClusterFileError(f"{where}: hub {kwargs['hub']!r} is not a declared DC")
    for key in ("adapt", "multipath"):
        if key in wan:
            kwargs[key] = _need(wan, key, bool, where)
    for key in ("replan_threshold", "min_dwell_s"):
        if key in wan:
            kwargs[key] = _need(wan, key, float, where)
            if kwargs[key] < 0:
                raise ClusterFileError(f"{where}: {key} must be >= 0")
    kwargs["links"] = _parse_links(data.get("link", []), seen, source)
    kwargs["security"] = _parse_security(data.get("security", {}), seen, source)
    if "compression" in data:
        try:
            kwargs["compression"] = CompressionConfig.from_params(
                data["compression"], where=f"{source} [compression]")
        except CompressionError as exc:
            raise ClusterFileError(str(exc)) from None
    if "sync" in data:
        try:
            kwargs["sync"] = SyncConfig.from_params(data["sync"], where=f"{source} [sync]")
        except SyncError as exc:
            raise ClusterFileError(str(exc)) from None
    if "ssh" in data:
        kwargs["ssh"] = _parse_ssh(data["ssh"], f"{source} [ssh]")
    if "emulation" in data:
        kwargs["emulation"] = parse_emulation(data["emulation"], seen, f"{source} [emulation]",
                                              ClusterFileError)
    where = f"{source} [recovery]"
    recovery = _known_fields(data.get("recovery", {}), "recovery", where)
    for key in ("worker_restarts", "cluster_restarts", "server_restarts"):
        if key in recovery:
            kwargs[key] = _need(recovery, key, int, where)
            if not 0 <= kwargs[key] <= 100:
                raise ClusterFileError(f"{where}: {key} must be in 0..100")
    for key in ("resume", "checkpoint"):
        if key in recovery:
            kwargs[key] = _need(recovery, key, str, where)
    return ClusterConfig(scheduler_host=sched_host, scheduler_port=sched_port, dcs=tuple(dcs),
                         scheduler_advertise=sched_advertise, source=source, **kwargs)


def _advertise(table: dict, bind: str, where: str) -> str:
    """A table's ``advertise`` address ("": peers reach it at its bind address)."""
    advertise = _host(_need(table, "advertise", str, where), where) \
        if "advertise" in table else ""
    reachable(bind, advertise, where, ClusterFileError)
    return advertise if advertise != bind else ""


def _worker_hosts(raw: dict, workers: int, where: str) -> tuple:
    """A DC's ``worker_hosts``: the hosts its workers run on, in turn."""
    if "worker_hosts" not in raw:
        return ()
    hosts = raw["worker_hosts"]
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise ClusterFileError(f"{where}: worker_hosts must be a non-empty list of host "
                               f"addresses, got {hosts!r}")
    if len(hosts) > workers:
        raise ClusterFileError(f"{where}: {len(hosts)} worker_hosts for {workers} worker(s): "
                               f"a host would run none")
    resolved = tuple(_host(h, f"{where} worker_hosts") for h in hosts)
    for host in resolved:
        reachable(host, "", f"{where} worker_hosts", ClusterFileError)
    if len(set(resolved)) != len(resolved):
        raise ClusterFileError(f"{where}: worker_hosts lists a host twice")
    return resolved


def _parse_ssh(raw, where: str) -> SshConfig:
    ssh = parse_ssh(raw, where, ClusterFileError)
    aliases = tuple(sorted((_host(a, f"{where} aliases"), d) for a, d in ssh.aliases))
    return replace(ssh, aliases=aliases)


def _parse_links(raw_links, dcs: set, source: str) -> tuple:
    if not isinstance(raw_links, list):
        raise ClusterFileError(f"{source}: 'link' must be an array of tables [[link]]")
    links, pairs = [], set()
    for i, raw in enumerate(raw_links):
        where = f"{source} [[link]] #{i + 1}"
        _known_fields(raw, "link", where)
        a, b = _need(raw, "a", str, where), _need(raw, "b", str, where)
        for end in (a, b):
            if end not in dcs:
                raise ClusterFileError(f"{where}: unknown DC {end!r}")
        if a == b:
            raise ClusterFileError(f"{where}: a link needs two different DCs")
        if frozenset((a, b)) in pairs:
            raise ClusterFileError(f"{where}: duplicate link {a}-{b}")
        pairs.add(frozenset((a, b)))
        if "mbps" in raw:
            ab = ba = _need(raw, "mbps", float, where)
        else:
            ab, ba = _need(raw, "mbps_ab", float, where), _need(raw, "mbps_ba", float, where)
        if not (ab > 0 and ba > 0):
            raise ClusterFileError(f"{where}: rates must be > 0 Mbit/s")
        latency = _need(raw, "latency_ms", float, where) if "latency_ms" in raw else 0.0
        if not 0 <= latency <= MAX_LATENCY_MS:
            raise ClusterFileError(f"{where}: latency_ms must be in [0, {MAX_LATENCY_MS:g}]")
        links.append(LinkSpec(a, b, ab, ba, latency))
    return tuple(links)


def _parse_security(raw, dcs: set, source: str) -> SecurityConfig:
    where = f"{source} [security]"
    _known_fields(raw, "security", where)
    curve = _need(raw, "curve", bool, where) if "curve" in raw else True
    secret_keys = _need(raw, "secret_keys", str, where) if "secret_keys" in raw else ""
    keys = {}
    try:
        if "scheduler_key" in raw:
            keys[SCHEDULER_PRINCIPAL] = check_key(raw["scheduler_key"],
                                                  f"{where} scheduler_key").decode()
        dc_keys = raw.get("dc_keys", {})
        if not isinstance(dc_keys, dict):
            raise ClusterFileError(f"{where}: dc_keys must be a table [security.dc_keys]")
        for dc, key in dc_keys.items():
            if dc not in dcs:
                raise ClusterFileError(f"{where}: dc_keys names unknown DC {dc!r}")
            keys[dc] = check_key(key, f"{where} dc_keys.{dc}").decode()
    except SecurityError as exc:
        raise ClusterFileError(str(exc)) from exc
    if keys and set(keys) != dcs | {SCHEDULER_PRINCIPAL}:
        missing = sorted(dcs - set(keys)) + (["the scheduler"] if SCHEDULER_PRINCIPAL
                                             not in keys else [])
        raise ClusterFileError(f"{where}: no public key for {', '.join(missing)}")
    if len(set(keys.values())) != len(keys):
        raise ClusterFileError(f"{where}: two principals share one public key")
    return SecurityConfig(curve=curve, public_keys=tuple(sorted(keys.items())),
                          secret_keys=secret_keys)


def read_toml(path, error: type, what: str, hint: str = "") -> dict:
    """The TOML file ``path`` as a table; unreadable or invalid TOML raises ``error`` naming
    the file (``what`` says which kind of file, ``hint`` is added to a read error)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}{hint}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from exc


def load_cluster(path) -> ClusterConfig:
    """Read and validate the cluster file ``path``; its secret key folder is taken
    relative to the file's folder."""
    config = parse_cluster(read_toml(path, ClusterFileError, "cluster file"), source=str(path))
    folder = config.security.secret_keys
    if folder and not Path(folder).is_absolute():
        folder = str((Path(path).parent / folder).resolve())
        config = replace(config, security=replace(config.security, secret_keys=folder))
    for key in ("resume", "checkpoint"):     # relative to the cluster file's folder
        value = getattr(config, key)
        if value and not Path(value).is_absolute():
            config = replace(config, **{key: str((Path(path).parent / value).resolve())})
    return config


def pseudo_cluster(dcs: int, workers_per_dc: int, scheduler_port: int,
                   host: str = "127.0.0.1", **transport) -> ClusterConfig:
    """A one-machine cluster: ``dcs`` DCs named dc0.. with servers on free ports."""
    if dcs < 1 or workers_per_dc < 1:
        raise ClusterFileError("need at least one DC and one worker per DC")
    return ClusterConfig(scheduler_host=host, scheduler_port=scheduler_port,
                         dcs=tuple(DataCenter(f"dc{i}", host, 0, workers_per_dc)
                                   for i in range(dcs)), source="<pseudo>", **transport)
