"""The systems a benchmark compares, each run on the same emulated WAN: stock MXNet
(``dist_sync`` with one PS or one PS per DC) and netstorm's policies."""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from netstorm.geoserver.config.cluster import ClusterConfig, DataCenter
from netstorm.geoserver.config.compression import CompressionConfig
from netstorm.geoserver.config.emulation import EmulationConfig
from netstorm.geoserver.config.keys import SecurityConfig
from netstorm.geoserver.config.metrics import MetricsConfig
from netstorm.geoserver.config.settings import DEFAULT_CHUNK_BYTES
from netstorm.geoserver.config.status import StatusConfig
from netstorm.geoserver.config.sync import SyncConfig
from netstorm.launcher import free_port, run_cluster, run_pslite_cluster
from netstorm.wan.routes import path_delays_ms

from .dataplane import DEFAULT_DATAPLANE
from .scraper import Scrapers
from .torch_systems import TORCH_SYNCED, TORCH_SYSTEMS

__all__ = ["ADAPTIVE", "COMPRESSED", "DATAPLANE_OF", "FAPT_TREES", "OBSERVED", "STATS_FILE",
           "SYNCED", "SYSTEMS", "VARIANTS", "RunContext", "cluster_config",
           "cluster_dataplane_missing", "configured_dataplane", "observed_config",
           "run_mxnet", "run_netstorm", "run_observed"]


STATS_FILE = "scheduler-stats.jsonl"
ADAPTIVE = ("netstorm-aware", "netstorm-full")     # their estimates are compared under --dynamic
OBSERVED = ("netstorm-fapt-observed",)      # scraped while they run: their scrape counts


@dataclass
class RunContext:
    wan: object
    topology: object
    workers_per_dc: int
    worker_args: list
    out_dir: Path
    log: object
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    compression: dict = field(default_factory=dict)   # setting -> its MXNet compression_params
    sync: dict = field(default_factory=dict)    # setting -> its SyncConfig (train mode)
    mixed_args: list = field(default_factory=list)  # the workers' optimizer under mixed
    latency: bool = False       # emulate the topology's delays (netstorm's transport only)
    local_steps: int = 4        # torch-post-local-sgd: steps per model average (cli sets it)

    @property
    def best_dc(self) -> str:
        """The DC with the most link capacity (in + out): where a single PS goes."""
        graph = self.topology.graph()
        return max(self.topology.dcs, key=lambda dc: (
            sum(d["mbps"] for *_, d in graph.out_edges(dc, data=True))
            + sum(d["mbps"] for *_, d in graph.in_edges(dc, data=True)),
            -self.topology.dcs.index(dc)))

    def command(self, kvstore: str, out: Path, compression: dict | None = None,
                extra: tuple = ()) -> list:
        if compression:
            extra = (*extra, "--compression", json.dumps(compression))
        return [sys.executable, "-P", "-m", "netstorm.bench.worker", "--kvstore", kvstore,
                "--out", str(out), *self.worker_args, *extra]


def run_mxnet(ctx: RunContext, out: Path, sharded: bool, compression: str | None = None) -> int:
    """Stock MXNet ``dist_sync``: one PS in the best-connected DC, or one per DC (``sharded``);
    ``compression``: a type in ``ctx.compression``, whose params the workers' Trainer gets."""
    servers = list(ctx.topology.dcs) if sharded else [ctx.best_dc]
    if sharded:   # scheduler beside the first server: put the best-connected DC first
        servers.remove(ctx.best_dc)
        servers.insert(0, ctx.best_dc)
    return run_pslite_cluster(servers, list(ctx.topology.dcs), ctx.workers_per_dc,
                              ctx.command("dist_sync", out, ctx.compression.get(compression)),
                              address=ctx.wan.dc_address,
                              wrap_dc=ctx.wan.exec_prefix, out=ctx.log)


def run_netstorm(ctx: RunContext, out: Path, policy: str, adapt: bool = False,
                 multipath: bool = False, curve: bool = True,
                 compression: str | None = None, sync: str = "fsa",
                 trees: str = "split", dataplane: str | None = None) -> int:
    """netstorm with the scheduler in the best-connected DC. ``hips``: the star rooted there;
    ``fapt``: multi-root trees computed at start from the links' rates (declared in the
    cluster file, as an operator would), never updated unless ``adapt`` (re-planned from
    passive measurements); ``multipath``: idle links relay part of busy links' chunks.
    Every socket uses CURVE with throw-away keys unless ``curve`` is False (what security
    costs). ``trees``: the cluster file's ``[wan] trees`` ("shared": no split trees).
    ``compression``: a setting in ``ctx.compression``, whose params the cluster runs with
    (its ``[compression]``; the workers' Trainer asks for the same; None params: dense).
    ``sync``: a setting in ``ctx.sync`` (its ``[sync]``; under mixed the workers use
    ``ctx.mixed_args``' optimizer).
    The scheduler's estimates and policies go to ``out/scheduler-stats.jsonl``. With
    ``ctx.latency`` the links' delays are declared (for planning) and emulated
    (``[emulation]``: every process holds what it receives from another DC for the delay
    along the emulated route). ``dataplane``: the cluster file's ``[transport] dataplane``
    ("auto", "native", "python"; None: the file does not say, the servers' default)."""
    params = ctx.compression.get(compression)
    config = cluster_config(ctx, out, policy, adapt=adapt, multipath=multipath, curve=curve,
                            params=params, sync=sync, trees=trees, dataplane=dataplane)
    extra = ctx.mixed_args if sync == "mixed" else ()
    return run_cluster(config, ctx.command("netstorm", out, params, extra),
                       wrap_dc=ctx.wan.exec_prefix, out=ctx.log)


def observed_config(ctx: RunContext, out: Path) -> ClusterConfig:
    """netstorm-fapt's cluster file with ``[metrics]`` on (any free port, each process's
    file_sd entry in ``out/targets``) and ``[status]`` on (a free port, loopback)."""
    return dataclasses.replace(
        cluster_config(ctx, out, "fapt"),
        metrics=MetricsConfig(on=True, ports=(0, 0), targets_dir=str(out.resolve() / "targets")),
        status=StatusConfig(port=free_port()))


def run_observed(ctx: RunContext, out: Path) -> int:
    """netstorm-fapt with its metrics and status page on and read as an operator would:
    one :class:`~netstorm.bench.scraper.Scrapers` process per DC namespace GETs its
    endpoints' ``/metrics`` every 5 s and, in the scheduler's (the hub DC's), the status
    page's ``/status.json`` every 2 s, until the run ends (counts in ``out/scrapes-*.json``,
    read by :func:`~netstorm.bench.scraper.apply_scrapes`)."""
    config = observed_config(ctx, out)
    url = f"http://{config.status.reached_at(config.scheduler_host)}:{config.status.port}" \
        "/status.json"
    with Scrapers(ctx.wan, ctx.topology.dcs, config.hub_dc, Path(config.metrics.targets_dir),
                  out, url):
        return run_cluster(config, ctx.command("netstorm", out),
                           wrap_dc=ctx.wan.exec_prefix, out=ctx.log)


def cluster_config(ctx: RunContext, out: Path, policy: str, adapt: bool = False,
                   multipath: bool = False, curve: bool = True, params: dict | None = None,
                   sync: str = "fsa", trees: str = "split",
                   dataplane: str | None = None) -> ClusterConfig:
    """The cluster file :func:`run_netstorm` runs (its arguments; ``params``: the
    compression's MXNet params). A ``dataplane`` this checkout's cluster files cannot say
    is an error naming the field."""
    hub = ctx.best_dc
    links = ctx.topology.links
    emulation = EmulationConfig(tuple(
        (a, b, ms) for (a, b), ms in path_delays_ms(ctx.topology).items())) \
        if ctx.latency else EmulationConfig()
    return ClusterConfig(scheduler_host=ctx.wan.dc_address(hub),
                         scheduler_port=free_port(),
                         dcs=tuple(DataCenter(dc, ctx.wan.dc_address(dc), 0, ctx.workers_per_dc)
                                   for dc in ctx.topology.dcs),
                         policy=policy, hub=hub, links=links, timeout_s=600.0,
                         chunk_bytes=ctx.chunk_bytes, adapt=adapt, multipath=multipath,
                         trees=trees,
                         stats=str(out / STATS_FILE), security=SecurityConfig(curve=curve),
                         compression=CompressionConfig.from_params(params),
                         sync=ctx.sync.get(sync, SyncConfig()), emulation=emulation,
                         **_dataplane_field(dataplane))


def cluster_dataplane_missing(names) -> list:
    """Those of the systems ``names`` that need the cluster file's ``[transport]
    dataplane`` field, if this checkout's :class:`ClusterConfig` has none (else [])."""
    if "dataplane" in {f.name for f in dataclasses.fields(ClusterConfig)}:
        return []
    return [name for name in names if name in DATAPLANE_OF]


def _dataplane_field(dataplane: str | None) -> dict:
    """``{"dataplane": value}`` for :class:`ClusterConfig`, {} for None; ValueError when
    this checkout's ClusterConfig has no such field (``[transport] dataplane``)."""
    if dataplane is None:
        return {}
    if cluster_dataplane_missing(["netstorm-fapt-python"]):
        raise ValueError(f"[transport] dataplane = {dataplane!r}: this checkout's cluster "
                         f"files have no dataplane field (geoserver/config/cluster_fields.py)")
    return {"dataplane": dataplane}


def configured_dataplane(name: str) -> str | None:
    """What the cluster file of system ``name`` says in ``[transport] dataplane`` (the
    default, "auto", unless the system sets it); None for stock MXNet's systems."""
    if not name.startswith("netstorm"):
        return None
    return DATAPLANE_OF.get(name, DEFAULT_DATAPLANE)


DATAPLANE_OF = {"netstorm-fapt-python": "python"}    # system -> its [transport] dataplane

VARIANTS = {    # system -> (sync setting, compression setting), on fapt's trees
    "netstorm-fp16": (None, "fp16"),
    "netstorm-bsc": (None, "bsc"),
    "netstorm-mpq": (None, "mpq"),
    "netstorm-hfa": ("hfa", None),
    "netstorm-mixed": ("mixed", None),
    "netstorm-esync": ("esync", None),
    "netstorm-diloco": ("diloco", None),
    "netstorm-diloco-fp16": ("diloco", "fp16"),
    "netstorm-diloco-int8": ("diloco", "int8"),
    "netstorm-diloco-topk2bit": ("diloco", "topk2bit"),
    "netstorm-streaming": ("streaming", "streaming"),
}


def _variant(sync: str | None, compression: str | None):
    return lambda ctx, out: run_netstorm(ctx, out, "fapt", compression=compression,
                                         sync=sync or "fsa")


SYSTEMS = {
    "mxnet-1ps": lambda ctx, out: run_mxnet(ctx, out, sharded=False),
    "mxnet-sharded": lambda ctx, out: run_mxnet(ctx, out, sharded=True),
    "netstorm-hips": lambda ctx, out: run_netstorm(ctx, out, "star"),
    "netstorm-fapt": lambda ctx, out: run_netstorm(ctx, out, "fapt"),
    "netstorm-fapt-observed": run_observed,
    "netstorm-fapt-insecure": lambda ctx, out: run_netstorm(ctx, out, "fapt", curve=False),
    "netstorm-fapt-python": lambda ctx, out: run_netstorm(
        ctx, out, "fapt", dataplane=DATAPLANE_OF["netstorm-fapt-python"]),
    "netstorm-shared": lambda ctx, out: run_netstorm(ctx, out, "fapt", trees="shared"),
    "netstorm-aware": lambda ctx, out: run_netstorm(ctx, out, "fapt", adapt=True),
    "netstorm-full": lambda ctx, out: run_netstorm(ctx, out, "fapt", adapt=True,
                                                   multipath=True),
    "mxnet-2bit": lambda ctx, out: run_mxnet(ctx, out, sharded=False, compression="2bit"),
    **{name: _variant(*settings) for name, settings in VARIANTS.items()},
}
SYSTEMS.update(TORCH_SYSTEMS)   # PyTorch's own and netstorm from PyTorch (torch_systems.py)
# system -> the sync setting it runs with (a key of RunContext.sync: several settings may
# share a mode, e.g. diloco and streaming) and the compression setting (RunContext.compression)
SYNCED = {name: sync for name, (sync, _) in VARIANTS.items() if sync}
SYNCED.update(TORCH_SYNCED)
COMPRESSED = {"mxnet-2bit": "2bit",
              **{name: kind for name, (_, kind) in VARIANTS.items() if kind}}
# systems that start on fapt's split trees (report.fapt_plan): their links' assigned bytes
FAPT_TREES = ("netstorm-fapt", "netstorm-fapt-torch", "netstorm-fapt-observed", "netstorm-fapt-insecure", "netstorm-fapt-python",
              "netstorm-aware", "netstorm-full", *VARIANTS)
