"""``netstorm-launch --slurm``: start a cluster inside a Slurm allocation (an ``sbatch``
script or ``salloc``), every node's share as one ``srun`` job step.

Where the processes run comes from Slurm's environment, never from a host file:

* **One job for the whole cluster** (``--dcs N`` or ``--cluster FILE``, no ``--dc``). A
  heterogeneous job gives each DC one component, in the DCs' order (DC i runs on
  ``SLURM_JOB_NODELIST_HET_GROUP_i``); a plain job's nodes are cut into contiguous blocks,
  one per DC (with fewer nodes than DCs, DC i shares node i mod nodes). In each DC the server
  runs on its first node and the workers on its nodes in turn; the scheduler runs on the
  first DC's first node. A cluster file's addresses are replaced; its ports, WAN, links,
  recovery and keys are kept.
* **One job per DC** (``--cluster FILE --dc NAME``, a job per DC, e.g. one per site's own
  Slurm). The file fixes where the scheduler and every DC's server are reached: those are
  the addresses the other jobs' processes dial, so they cannot move with an allocation. The
  job must hold its DC's server host (``sbatch --nodelist``); its DC's workers run on the
  job's nodes in turn; it runs the scheduler exactly when the file places the scheduler on
  one of its nodes.

Node names come from ``scontrol show hostnames`` (Slurm's own hostlist expansion), their
addresses from ``scontrol show node`` (``NodeAddr``: where Slurm itself reaches them),
resolved once here. Each node's share starts as ``srun --nodes=1 --ntasks=1
--nodelist=NODE [--het-group=G] PYTHON -m netstorm.launcher.remote``, fed the bundle
``--ssh`` sends (:mod:`.ssh`, :mod:`.remote`; the nodes share this Python and folder): its
lines come back prefixed with the node, the first failure stops every node, and closing a
step's input stops its processes. Placement is O(nodes + workers); two ``scontrol`` calls.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace

from netstorm.geoserver.config.cluster import ClusterConfig, ClusterFileError
from netstorm.geoserver.config.hosts import resolve_host

from . import placement
from .ssh import bundle, forwarded_env, run_far_ends
from .supervisor import with_keys

__all__ = ["Allocation", "Share", "SlurmError", "dc_node_sets", "expand_hostlist",
           "node_addresses", "place_one_dc", "place_whole", "read_allocation",
           "run_in_allocation", "run_over_srun", "shares_of", "srun_argv"]

SCONTROL_TIMEOUT_S = 30


class SlurmError(ValueError):
    """The allocation cannot run the cluster as asked; the text says why and what to do."""


@dataclass(frozen=True)
class Allocation:
    """A Slurm job's nodes: ``groups`` holds the node names of each component (one for a
    plain job, one per component of a heterogeneous one)."""

    job_id: str
    groups: tuple
    heterogeneous: bool = False

    @property
    def nodes(self) -> list:
        """Every node of the job, once each, in Slurm's order."""
        return list(dict.fromkeys(n for group in self.groups for n in group))


@dataclass(frozen=True)
class Share:
    """One node's job step: the node's Slurm name (``srun --nodelist``), the address its
    processes bind and are reached at, and its component in a heterogeneous job."""

    node: str
    address: str
    group: int | None = None


def _scontrol(args: list, run) -> str:
    """``scontrol ARGS``' output; :class:`SlurmError` naming the command if it fails."""
    argv = ["scontrol", *args]
    try:
        done = run(argv, capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except FileNotFoundError:
        raise SlurmError("--slurm: 'scontrol' is not on PATH; run the launcher on a node "
                         "of the allocation, where Slurm's commands are installed") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"--slurm: '{' '.join(argv)}' did not answer within "
                         f"{SCONTROL_TIMEOUT_S}s") from None
    if done.returncode != 0:
        raise SlurmError(f"--slurm: '{' '.join(argv)}' failed: "
                         f"{(done.stderr or done.stdout).strip()[-400:]}")
    return done.stdout


def expand_hostlist(hostlist: str, run=subprocess.run) -> list:
    """The node names of a Slurm hostlist (``n[1-3],gpu7``), by ``scontrol show
    hostnames``, in Slurm's order."""
    names = _scontrol(["show", "hostnames", hostlist], run).split()
    if not names:
        raise SlurmError(f"--slurm: the node list {hostlist!r} names no node")
    return names


def read_allocation(environ, run=subprocess.run) -> Allocation:
    """The job this launcher runs in, from Slurm's variables in ``environ``."""
    job = environ.get("SLURM_JOB_ID", "")
    if not job:
        raise SlurmError("--slurm: not inside a Slurm allocation (SLURM_JOB_ID is not set); "
                         "run netstorm-launch from an sbatch script (examples/slurm/) or "
                         "in an salloc shell")
    size = environ.get("SLURM_HET_SIZE", "")
    if size:
        if not size.isdigit() or int(size) < 1:
            raise SlurmError(f"--slurm: SLURM_HET_SIZE={size!r} is not a component count")
        groups = []
        for i in range(int(size)):
            name = f"SLURM_JOB_NODELIST_HET_GROUP_{i}"
            if not environ.get(name):
                raise SlurmError(f"--slurm: heterogeneous job {job} has no {name}")
            groups.append(tuple(expand_hostlist(environ[name], run)))
        return Allocation(job, tuple(groups), heterogeneous=True)
    hostlist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST", "")
    if not hostlist:
        raise SlurmError(f"--slurm: job {job} has no SLURM_JOB_NODELIST")
    return Allocation(job, (tuple(expand_hostlist(hostlist, run)),))


def node_addresses(names: list, run=subprocess.run, resolve=resolve_host) -> dict:
    """Each node name's address: its ``NodeAddr`` (default: its name), resolved here."""
    text = _scontrol(["show", "node", "--oneliner", ",".join(names)], run)
    declared = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" in fields:
            declared[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return {name: resolve(declared.get(name, name), f"--slurm: node {name} (NodeAddr)",
                          SlurmError) for name in names}


def dc_node_sets(allocation: Allocation, dc_names: list) -> list:
    """Each DC's ``[(node, component)]``: a heterogeneous job's component i for DC i; a
    plain job's nodes in contiguous blocks (sizes differing by at most one), or node
    i mod nodes for DC i when there are fewer nodes than DCs (component None). O(nodes)."""
    if allocation.heterogeneous:
        if len(allocation.groups) != len(dc_names):
            raise SlurmError(
                f"--slurm: heterogeneous job {allocation.job_id} has "
                f"{len(allocation.groups)} component(s), the cluster {len(dc_names)} DC(s) "
                f"({', '.join(dc_names)}): give one component per DC, in the DCs' order")
        return [[(node, i) for node in group] for i, group in enumerate(allocation.groups)]
    nodes, count = allocation.groups[0], len(dc_names)
    if len(nodes) < count:
        return [[(nodes[i % len(nodes)], None)] for i in range(count)]
    return [[(node, None) for node in nodes[i * len(nodes) // count:
                                            (i + 1) * len(nodes) // count]]
            for i in range(count)]


def _check_ports(config: ClusterConfig, where: str) -> ClusterConfig:
    """``config`` unless two processes now bind one host and port (fixed ports of DCs that
    share a node)."""
    bound = [((dc.host, dc.server_port), f"the server of {dc.name}")
             for dc in config.dcs if dc.server_port] + \
        [((config.scheduler_host, config.scheduler_port), "the scheduler")]
    seen = {}
    for key, who in bound:
        if key in seen:
            raise SlurmError(f"{where}: {seen[key]} and {who} would both bind "
                             f"{key[0]}:{key[1]}; give them different ports or the job "
                             f"more nodes")
        seen[key] = who
    return config


def place_whole(config: ClusterConfig, node_sets: list, addresses: dict) -> ClusterConfig:
    """The whole cluster on the allocation: each DC's server on its first node, its
    workers on its nodes in turn, the scheduler on the first DC's first node."""
    dcs = []
    for dc, nodes in zip(config.dcs, node_sets):
        hosts = tuple(dict.fromkeys(addresses[node] for node, _ in nodes))
        dcs.append(replace(dc, host=hosts[0], advertise="", worker_hosts=hosts))
    placed = replace(config, dcs=tuple(dcs), scheduler_host=dcs[0].host,
                     scheduler_advertise="")
    return _check_ports(placed, f"{config.source} on Slurm's nodes")


def place_one_dc(config: ClusterConfig, name: str, nodes: list, addresses: dict,
                 scheduler: bool | None) -> tuple:
    """``(config, addresses this job starts)`` for DC ``name`` run by a job holding
    ``nodes``: its workers on the job's nodes in turn; the server and the scheduler where
    the file places them, which must (or, for the scheduler, may) be nodes of the job."""
    dc = config.dc(name)
    ours = list(dict.fromkeys(addresses[n] for n in nodes))
    listing = ", ".join(f"{n} ({addresses[n]})" for n in nodes)
    if dc.server_host not in ours:
        raise SlurmError(
            f"{config.source}: [[dc]] {name} places its server on {dc.server_host}, which is "
            f"not a node of this job ({listing}): submit the job with that node "
            f"(sbatch --nodelist=NODE) or set the DC's host to its address")
    here = config.scheduler_reached_at in ours
    if scheduler is True and not here:
        raise SlurmError(f"--scheduler: {config.source} places the scheduler on "
                         f"{config.scheduler_reached_at}, not a node of this job ({listing})")
    if scheduler is False and here:
        raise SlurmError(f"--no-scheduler: {config.source} places the scheduler on "
                         f"{config.scheduler_reached_at}, a node of this job: this job "
                         f"runs it")
    workers = [dc.server_host] + [a for a in ours if a != dc.server_host]
    config = replace(config, dcs=tuple(replace(d, worker_hosts=tuple(workers))
                                       if d.name == name else d for d in config.dcs))
    for address in ours:
        part = placement.on_host(config, address)
        strays = sorted({d for d in part.servers if d != name} |
                        {d for d, _ in part.workers if d != name})
        if strays:
            raise SlurmError(f"{config.source}: DC {strays[0]} also has processes on "
                             f"{address}, a node of DC {name}'s job; one job runs one DC")
    return config, [a for a in ours if not placement.on_host(config, a).empty]


def shares_of(config: ClusterConfig, started: list, node_sets: list, addresses: dict) -> list:
    """A :class:`Share` for each address in ``started`` (each node once: the first node
    name, and component, found at that address)."""
    at = {}
    for nodes in node_sets:
        for node, group in nodes:
            at.setdefault(addresses[node], (node, group))
    return [Share(at[a][0], a, at[a][1]) for a in started]


def srun_argv(share: Share, python: str) -> list:
    """The job step that runs ``share``'s processes: one task on its node, all of the
    job's CPUs and memory there, unbound, beside any other step (``--overlap``)."""
    group = [] if share.group is None else [f"--het-group={share.group}"]
    return ["srun", *group, "--nodes=1", "--ntasks=1", "--ntasks-per-node=1",
            f"--nodelist={share.node}", "--overlap", "--whole", "--cpu-bind=none",
            f"--job-name=netstorm-{share.node}", python, "-P", "-m", "netstorm.launcher.remote"]


def run_over_srun(config: ClusterConfig, shares: list, command: list, whole_cluster: bool,
                  as_dist_sync: bool, environ, out=None, python: str = sys.executable) -> int:
    """Run ``shares`` of ``config`` (``whole_cluster``: all of it, with throw-away keys if
    the file has none) as one job step each, ``command`` on the workers. Returns the exit
    code; every step is stopped before it returns. ``environ``: what is forwarded from."""
    with tempfile.TemporaryDirectory(prefix="netstorm-slurm-") as tmp:
        config = with_keys(config, tmp, whole_cluster=whole_cluster)
        env = forwarded_env(config, environ)
        parts = [placement.on_host(config, share.address) for share in shares]
        dcs = {dc for part in parts for dc in (*part.servers, *(d for d, _ in part.workers))}
        far_ends = [(share.node, f"{share.node} ({share.address}): {part.describe()}",
                     srun_argv(share, python),
                     bundle(config, share.address, command, env, os.getcwd(), as_dist_sync))
                    for share, part in zip(shares, parts)]
        return run_far_ends(out, far_ends, f"{len(shares)} node(s), {len(dcs)} DC(s), "
                                           f"{sum(len(p.workers) for p in parts)} worker(s)")


def plan(config: ClusterConfig, args, allocation: Allocation, run=subprocess.run,
         resolve=resolve_host) -> tuple:
    """``(placed config, shares, whole cluster?)`` for the launcher's ``args`` (``dc``,
    ``scheduler``, ``cluster``) in ``allocation``."""
    addresses = node_addresses(allocation.nodes, run, resolve)
    if not args.dc:
        node_sets = dc_node_sets(allocation, [dc.name for dc in config.dcs])
        placed = place_whole(config, node_sets, addresses)
        return placed, shares_of(placed, placement.hosts(placed), node_sets, addresses), True
    if allocation.heterogeneous:
        raise SlurmError("--slurm --dc: a heterogeneous job runs the whole cluster, one "
                         "component per DC; drop --dc (or submit one plain job per DC)")
    if len(args.dc) != 1:
        raise SlurmError("--slurm: one job runs one DC; give one --dc (or none, for the "
                         "whole cluster)")
    if not args.cluster:
        raise SlurmError("--slurm --dc needs --cluster FILE: the file says where the "
                         "scheduler and every DC's server are reached")
    node_sets = [[(node, None) for node in allocation.nodes]]
    placed, started = place_one_dc(config, args.dc[0], allocation.nodes, addresses,
                                   args.scheduler)
    return placed, shares_of(placed, started, node_sets, addresses), False


def run_in_allocation(config: ClusterConfig, args, environ=None, out=None,
                      run=subprocess.run) -> int:
    """``netstorm-launch --slurm``, the launcher's edge: place ``config`` on the allocation
    that ``environ`` (default: this process's environment) describes and run it (``args``:
    the launcher's parsed flags). Returns the exit code; 2, with the reason on stderr, when
    the allocation cannot run it."""
    environ = os.environ if environ is None else environ
    try:
        allocation = read_allocation(environ, run)
        config, shares, whole = plan(config, args, allocation, run)
        kind = "heterogeneous job" if allocation.heterogeneous else "job"
        print(f"[launch] slurm {kind} {allocation.job_id}: {len(allocation.nodes)} node(s) "
              f"{', '.join(allocation.nodes)}", file=out or sys.stdout, flush=True)
        return run_over_srun(config, shares, args.command, whole, args.as_dist_sync,
                             environ, out)
    except (SlurmError, ClusterFileError) as exc:
        print(f"launch: {exc}", file=sys.stderr, flush=True)
        return 2
