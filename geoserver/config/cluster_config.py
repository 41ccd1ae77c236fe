"""The cluster file as typed data: :class:`ClusterConfig` (every table's settings),
:class:`DataCenter` (one ``[[dc]]``), and :class:`ClusterFileError`, the one error a bad
cluster file raises. A config refuses, on construction, settings that contradict each other
(one value alone is checked where the file is read, ``config.cluster_tables``), also when it
is built in code. Pure, frozen data."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .compression import CompressionConfig
from .elastic import elastic_problem
from .emulation import EmulationConfig
from .hosts import SshConfig
from .keys import SecurityConfig
from .limits import node_count_problem
from .local_restart import worker_restart_problem
from .metrics import MetricsConfig, crowded_host
from .sync import SyncConfig
from .status import StatusConfig
from .settings import DEFAULT_AUDIT_EVERY
from .settings import DEFAULT_CHUNK_BYTES, DEFAULT_DEAD_AFTER_S, DEFAULT_FUSE_BYTES, \
    DEFAULT_FUSE_LINGER_S, DEFAULT_HEARTBEAT_S, DEFAULT_STALL_S, DEFAULT_TIMEOUT_S
from .settings import DEFAULT_DETECT_FLOOR_S

__all__ = ["ClusterConfig", "ClusterFileError", "DataCenter"]


class ClusterFileError(ValueError):
    """The cluster file is unusable; the message names the file and the field."""


@dataclass(frozen=True)
class DataCenter:
    """One DC: its server binds ``host`` and is reached at ``advertise`` ("": ``host``);
    its workers run on ``worker_hosts`` in turn ((): on the server's host), bind a port of
    ``worker_ports`` (``(low, high)``; (): any free port) and are reached at
    ``worker_advertise`` (one address per worker host; (): the address they bind). The
    server's bulk channel binds ``bulk_port`` (0: any free port)."""

    name: str
    host: str
    server_port: int
    workers: int
    advertise: str = ""
    worker_hosts: tuple = ()
    worker_ports: tuple = ()        # (low, high), inclusive; (): any free port
    worker_advertise: tuple = ()    # parallel to worker_hosts (or one, without them)
    bulk_port: int = 0

    @property
    def server_host(self) -> str:
        """Where the server is reached (and runs, for ``launch.py --ssh``)."""
        return self.advertise or self.host

    def _worker_slot(self, index: int) -> int:
        return index % len(self.worker_hosts) if self.worker_hosts else 0

    def worker_bind(self, index: int) -> str:
        """The address worker ``index`` (0-based) of this DC binds: its worker host, else
        the server's address (``host`` once ``worker_advertise`` says where it is reached,
        else where the server is reached)."""
        if self.worker_hosts:
            return self.worker_hosts[self._worker_slot(index)]
        return self.host if self.worker_advertise else self.server_host

    def worker_host(self, index: int) -> str:
        """The host of worker ``index`` (0-based) of this DC: the address it is reached at
        and runs on (its ``worker_advertise``, else the address it binds)."""
        if self.worker_advertise:
            return self.worker_advertise[self._worker_slot(index)]
        return self.worker_bind(index)


@dataclass(frozen=True)
class ClusterConfig:
    """A whole cluster, as its cluster file describes it (the format: ``config.cluster``)."""

    scheduler_host: str
    scheduler_port: int
    dcs: tuple
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    dead_after_s: float = DEFAULT_DEAD_AFTER_S
    detect_floor_s: float = DEFAULT_DETECT_FLOOR_S  # the adaptive deadline's floor (0: off)
    stall_s: float = DEFAULT_STALL_S
    max_idle_s: float = 0.0     # a worker silent this long while others wait on it fails
                                # the run (0: never; scheduler/stalls.py)
    fuse_bytes: int = DEFAULT_FUSE_BYTES
    fuse_linger_s: float = DEFAULT_FUSE_LINGER_S
    dataplane: str = "auto"    # [transport] dataplane: "auto", "native" or "python"
    policy: str = "star"
    hub: str = ""
    adapt: bool = False
    replan_threshold: float = 0.2
    min_dwell_s: float = 10.0
    multipath: bool = False
    trees: str = "split"    # [wan] trees: "split" or "shared" (docs/policy.md)
    links: tuple = ()       # [[link]]: Link, the declared WAN
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
    audit_every: int = DEFAULT_AUDIT_EVERY  # [recovery]: replica digests every N rounds
    scheduler_restarts: int = 0         # [recovery]: new schedulers started in its place
    min_dcs: int = 0                    # [elastic]: the fewest DCs the run goes on with (0: all)
    rejoins: int = 0                    # [elastic]: how often departed DCs may come back
    ssh: SshConfig = SshConfig()        # [ssh]: how launch.py --ssh reaches every host
    emulation: EmulationConfig = EmulationConfig()  # [emulation]: emulated WAN delays only
    metrics: MetricsConfig = MetricsConfig()    # [metrics]: Prometheus endpoints (off)
    status: StatusConfig = StatusConfig()           # [status]: the live status page
    source: str = field(default="<built>", compare=False)

    def __post_init__(self):
        """Refuse settings that contradict each other (one value alone is checked where it
        is read): every node beats every ``heartbeat_s``, so a node declared dead after
        less than two beats' silence, or a wait for a peer shorter than two beats, would
        fail a healthy cluster. Every node needs an id the wire can carry."""
        too_many = node_count_problem(len(self.dcs), self.num_workers)
        if too_many:
            raise ClusterFileError(f"{self.source}: {too_many}")
        beats = 2 * self.heartbeat_s
        for key in ("dead_after_s", "timeout_s") + (("max_idle_s",) if self.max_idle_s else ()):
            if getattr(self, key) < beats:
                raise ClusterFileError(
                    f"{self.source}: {key} = {getattr(self, key):g} is below two heartbeats "
                    f"(heartbeat_s = {self.heartbeat_s:g}): a healthy node would be taken "
                    f"for dead; raise {key} to at least {beats:g} or lower heartbeat_s")
        crowded = crowded_host(self.metrics, self.scheduler_reached_at, self.dcs)
        if crowded:
            raise ClusterFileError(f"{self.source}: {crowded}")
        if self.cluster_restarts and not self.checkpoint:
            raise ClusterFileError(f"{self.source}: [recovery] cluster_restarts needs "
                                   f"'checkpoint', the file the run restarts from")
        if self.server_restarts and self.sync.mode == "mixed":
            raise ClusterFileError(
                f"{self.source}: [recovery] server_restarts cannot run with [sync] mode "
                f"'mixed': each DC's replica is its own (other DCs' updates applied in its "
                f"own order, with its own delay compensation), so no peer holds the lost "
                f"DC's model (docs/recovery.md)")
        if self.server_restarts and self.sync.rounds_per_wan_round > 1:
            raise ClusterFileError(
                f"{self.source}: [recovery] server_restarts needs [sync] k2 = 1 under 'hfa' "
                f"(got {self.sync.k2}): the DC rounds since the last WAN round are only on "
                f"the lost server, and its workers no longer hold their deltas "
                f"(docs/recovery.md)")
        restart_problem = worker_restart_problem(self.sync) if self.worker_restarts else ""
        if restart_problem:
            raise ClusterFileError(f"{self.source}: [recovery] worker_restarts "
                                   f"{restart_problem} (docs/recovery.md)")
        for name, on in (("resume", self.resume), ("checkpoint", self.checkpoint)):
            if on and self.sync.mode != "fsa":
                raise ClusterFileError(
                    f"{self.source}: [recovery] {name} needs [sync] mode 'fsa': under "
                    f"{self.sync.mode!r} the workers' own models and step counts are not "
                    f"on the servers (docs/recovery.md)")
        if self.sync.quorum > len(self.dcs):
            raise ClusterFileError(f"{self.source}: [sync] quorum = {self.sync.quorum} is more "
                                   f"than the cluster's {len(self.dcs)} DCs")
        elastic = elastic_problem(self.min_dcs, len(self.dcs), self.sync,
                                  self.compression.on, self.adapt, self.rejoins)
        if elastic:
            raise ClusterFileError(f"{self.source}: [elastic] {elastic}")
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
