"""``netstorm-bench --mode train --chaos SPEC --every SECONDS --duration SECONDS``: one system
trained twice in one invocation on the same WAN, with the same seed, steps and cluster file
(recovery on in both): fault-free, then with a fault every ``--every`` seconds
(netstorm.bench.chaos_spec: which; netstorm.bench.chaos: how). Reports goodput against the
fault-free run, time to recover per fault kind, lost or doubled updates and the final
quality of both (docs/recovery-chaos.md)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from netstorm import wan as wanlib
from netstorm.datasets import DatasetError
from netstorm.geoserver.config.cluster import ClusterConfig, ClusterFileError
from netstorm.geoserver.config.settings import MAX_RESTARTS
from netstorm.launcher import interrupts_raise, run_cluster
from netstorm.scheduler.topology import TopologyError

from . import chaos_report
from .chaos import FaultLog, FaultLoop, Injector
from .chaos_spec import (ChaosSpecError, goodput, lost_or_doubled, parse_seconds, parse_spec,
                         recovery_times, round_times, schedule, summarize_recoveries)
from .systems import STATS_FILE, SYNCED, VARIANTS, RunContext, cluster_config
from .train_args import (compression_params, eval_every_of, mixed_worker_args,
                         steps_per_wan_round, sync_settings, worker_args)

__all__ = ["CHAOS_SYSTEMS", "LoopbackWan", "StepWatcher", "add_chaos_arguments",
           "check_chaos_args", "run", "with_recovery"]

# system -> (policy, sync setting, compression setting): the netstorm systems a chaos run
# can start itself (it needs the launcher's process table, so not the observed one) and
# whose replicas all end equal (not mixed, esync or streaming: their workers end apart)
ENDS_APART = ("mixed", "esync", "streaming")
CHAOS_SYSTEMS = {"netstorm-hips": ("star", "fsa", None), "netstorm-fapt": ("fapt", "fsa", None),
                 **{name: ("fapt", sync or "fsa", kind)
                    for name, (sync, kind) in VARIANTS.items() if sync not in ENDS_APART}}
STEP = re.compile(r"\] step (\d+) t=([0-9.]+)")
EVAL = re.compile(r"\] iter (\d+)/\d+ \S+ (?:validation loss|test accuracy) ([0-9.]+)")


def add_chaos_arguments(p: argparse.ArgumentParser) -> None:
    c = p.add_argument_group("chaos (train mode, one netstorm system: docs/recovery-chaos.md)")
    c.add_argument("--chaos", default=None, metavar="SPEC",
                   help="train the system fault-free, then again with faults: "
                        "server,dc-stop[:20s],link-cut[:20s],worker,scheduler, or all")
    c.add_argument("--every", default="60s", help="chaos: seconds between faults")
    c.add_argument("--duration", default="15m",
                   help="chaos: faults are injected for this long (the run trains --iters "
                        "steps either way: choose them to last about this long)")
    c.add_argument("--chaos-seed", type=int, default=1, help="chaos: the schedule's seed")
    c.add_argument("--chaos-log", default=None,
                   help="chaos: the schedule, injections and undos as JSON lines (default: "
                        "chaos.jsonl in the logs folder)")
    c.add_argument("--checkpoint-every", type=int, default=25,
                   help="chaos: steps between the checkpoints a whole-cluster restart starts "
                        "from (where the sync mode allows checkpoints)")
    c.add_argument("--chaos-timeout", type=float, default=120.0,
                   help="chaos: the cluster's timeout_s (a fault nothing recovers from ends "
                        "the run, named, after this long instead of hanging)")
    c.add_argument("--chaos-loopback", action="store_true",
                   help="chaos: run on loopback, without the emulated WAN (no root needed; "
                        "link-cut faults are left out: there is no link to cut)")


def check_chaos_args(p: argparse.ArgumentParser, args) -> None:
    """Refuse a ``--chaos`` run that cannot work (``p.error`` naming the flag); resolve
    ``args.chaos`` to its kinds and ``--every``/``--duration`` to seconds."""
    if args.chaos is None:
        return
    if args.mode != "train":
        p.error("--chaos measures training under faults: add --mode train")
    if len(args.systems) != 1 or args.systems[0] not in CHAOS_SYSTEMS:
        p.error(f"--chaos runs one system, one of {', '.join(CHAOS_SYSTEMS)}; got "
                f"--systems {','.join(args.systems)}")
    period = steps_per_wan_round(args, args.systems[0])
    iters = args.iters_for.get(args.systems[0], args.iters)
    if period and iters % period:
        p.error(f"--chaos: --iters {iters} must be a multiple of the {period} steps between "
                f"{args.systems[0]}'s synchronizations, so that the final replicas are "
                f"synchronized and can be compared")
    if args.checkpoint_every < 0:
        p.error(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    if not args.chaos_timeout >= 5:
        p.error(f"--chaos-timeout must be >= 5 seconds, got {args.chaos_timeout:g}")
    try:
        args.chaos = parse_spec(args.chaos)
        args.every = parse_seconds(args.every, "--every")
        args.duration = parse_seconds(args.duration, "--duration")
    except ChaosSpecError as exc:
        p.error(str(exc))
    if args.chaos_loopback and any(k.name == "link-cut" for k in args.chaos):
        print("bench: --chaos-loopback: link-cut left out (no emulated WAN, no link to cut)",
              file=sys.stderr)
        args.chaos = tuple(k for k in args.chaos if k.name != "link-cut")
        if not args.chaos:
            p.error("--chaos-loopback: link-cut was the only fault kind")


class LoopbackWan:
    """The emulated WAN's stand-in on loopback: every DC at 127.0.0.1, no namespaces, no
    links (nothing to cut)."""

    def __init__(self, topology):
        self.topology = topology

    def exec_prefix(self, _dc: str) -> list:
        return []

    def dc_address(self, _dc: str) -> str:
        return "127.0.0.1"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


class StepWatcher:
    """The cluster's output stream: to the system's log file, rank 0's ``step N t=T`` lines
    kept (``steps``, the first one calls ``on_first_step``), its evaluations kept with
    their arrival time (``evals``), the launcher's lines echoed to the console."""

    def __init__(self, log, name: str, on_first_step=None):
        self.log, self.name = log, name
        self.steps: list = []
        self.evals: list = []
        self._on_first_step = on_first_step
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        self.log.write(text)
        for line in text.splitlines():
            step = STEP.search(line)
            if step:
                with self._lock:
                    self.steps.append((int(step.group(1)), float(step.group(2))))
                if self._on_first_step is not None:
                    self._on_first_step()
                    self._on_first_step = None
                continue
            seen = EVAL.search(line)
            if seen:
                self.evals.append((time.time(), int(seen.group(1)), float(seen.group(2))))
                print(f"bench: {self.name}: {line.split('] ', 1)[1].rstrip()}", flush=True)
            elif line.startswith("[launch]") or "was replaced in" in line \
                    or "rejoined" in line or " resumes after step " in line:
                print(f"bench: {self.name}: {line.rstrip()}", flush=True)

    def flush(self) -> None:
        self.log.flush()


def with_recovery(config: ClusterConfig, restarts: int, checkpoint: Path) -> tuple:
    """``config`` with every recovery option it accepts turned on (each tried on top of
    those accepted before: worker_restarts, server_restarts, scheduler_restarts if this
    checkout has it, checkpoint with cluster_restarts, and elastic DCs: a stopped or cut
    off DC leaves while a majority remains and rejoins when it is back); ``(config,
    {option: why refused})``."""
    restarts = max(1, min(restarts, MAX_RESTARTS))
    fields = {f.name for f in dataclasses.fields(ClusterConfig)}
    options = [("elastic", {"min_dcs": len(config.dcs) // 2 + 1, "rejoins": restarts}),
               ("worker_restarts", {"worker_restarts": restarts}),
               ("server_restarts", {"server_restarts": restarts}),
               ("scheduler_restarts", {"scheduler_restarts": restarts}),
               ("cluster_restarts", {"checkpoint": str(checkpoint),
                                     "cluster_restarts": restarts})]
    refused = {}
    for name, values in options:
        if not set(values) <= fields:
            refused[name] = "this checkout's cluster files have no such field"
            continue
        try:
            config = dataclasses.replace(config, **values)
        except ClusterFileError as exc:
            refused[name] = str(exc)
    return config, refused


def _one_run(args, wan, topology, name: str, out: Path, log_path: Path, faults=None,
             fault_log=None) -> dict:
    """Train ``name`` once (with ``faults``, if any); what its processes left and said."""
    policy, sync, kind = CHAOS_SYSTEMS[name]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    holder: dict = {}
    iters = args.iters_for.get(name, args.iters)
    checkpoint = out / "checkpoint.npz"
    with open(log_path, "w") as log:
        ctx = RunContext(wan, topology, args.workers_per_dc,
                         worker_args(args, wan, iters, eval_every_of(args, name)),
                         out, log, args.chunk_bytes, compression_params(args),
                         sync_settings(args), mixed_worker_args(args), latency=args.latency)
        base = dataclasses.replace(
            cluster_config(ctx, out, policy, params=ctx.compression.get(kind), sync=sync),
            timeout_s=args.chaos_timeout)
        config, refused = with_recovery(base, len(faults or ()) or 1, checkpoint)
        extra = ["--step-lines"]
        if config.checkpoint and args.checkpoint_every:
            extra += ["--checkpoint-every", str(args.checkpoint_every)]
        command = ctx.command("netstorm", out, ctx.compression.get(kind),
                              (*(ctx.mixed_args if sync == "mixed" else ()), *extra))
        loop = FaultLoop(Injector(lambda: holder.get("launcher"), wan if hasattr(
            wan, "link_devices") else None, fault_log), faults or [])
        watcher = StepWatcher(log, name + (" (faults)" if faults else " (fault-free)"),
                              loop.begin)
        ctx.log = watcher
        started = time.time()
        with loop:
            code = run_cluster(config, command, wrap_dc=wan.exec_prefix, out=watcher,
                               started=lambda launcher: holder.update(launcher=launcher))
    return {"code": code, "out": out, "iters": iters, "steps": watcher.steps,
            "evals": watcher.evals, "refused": refused, "started": started,
            "period": steps_per_wan_round(args, name) or 1,
            "injected": [r for r in (fault_log.records if fault_log else ())
                         if r["event"] == "inject"],
            "skipped": [r for r in (fault_log.records if fault_log else ())
                        if r["event"] == "skip"]}


def _figures(run: dict, workers: int) -> dict:
    """A run's figures: goodput, final quality, lost or doubled updates."""
    ranks = []
    for rank in range(workers):
        path = run["out"] / f"rank{rank}.json"
        ranks.append(json.loads(path.read_text()) if path.exists() else None)
    done = [r for r in ranks if r is not None]
    batch = done[0]["batch_size"] if done else 0
    reached = [r.get("last_step", run["iters"]) if r else 0 for r in ranks]
    # steps of a DC that left and rejoined: the rounds it was away are not in the model
    skipped = sum(r.get("skipped_steps", 0) if r else 0 for r in ranks)
    useful = (sum(min(s, run["iters"]) for s in reached) - skipped) * batch
    steps = run["steps"]
    wall = steps[-1][1] - steps[0][1] if len(steps) > 1 else 0.0
    stats = run["out"] / STATS_FILE
    audits = [json.loads(line) for line in stats.read_text().splitlines()
              if '"replica_audit"' in line] if stats.exists() else []
    curve = ranks[0]["curve"] if ranks[0] else []
    return {"exit_code": run["code"], "useful_samples": useful, "wall_s": round(wall, 3),
            "skipped_steps": skipped,
            "first_step_t": steps[0][1] if steps else None,
            "goodput": round(goodput(useful, wall), 3),
            "final_quality": curve[-1][1] if curve else None,
            "metric": ranks[0]["metric"] if ranks[0] else None,
            "lost_or_doubled": lost_or_doubled(
                audits, [r["weights_sha256"] if r else "(no result)" for r in ranks],
                reached, run["iters"]),
            "weights_sha256": ranks[0]["weights_sha256"] if ranks[0] else None,
            "recovery_refused": run["refused"]}


def _recoveries(run: dict) -> list:
    rounds = round_times(run["steps"], run["period"])
    times = [e["t"] for e in run["injected"]] + [None]
    return [{**{k: e[k] for k in ("index", "kind", "target", "length_s", "t")},
             **recovery_times(rounds, e["t"], until)}
            for e, until in zip(run["injected"], times[1:])]


def run(args) -> int:
    """The whole chaos benchmark of the parsed ``args``; the exit code (0: both runs
    completed with no lost or doubled update)."""
    try:
        topology = wanlib.load_topology(args.topology).scaled(args.bandwidth_scale)
        if not args.latency:
            topology = topology.without_latency()
    except TopologyError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    from .training import model_bytes as train_model_bytes  # noqa: PLC0415 (MXNet)
    try:
        train_model_bytes(args)     # builds the lm corpus' cache the workers then read
    except DatasetError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    name = args.systems[0]
    # absolute: the cluster file the launcher writes elsewhere names files in it
    logs = Path(args.keep_logs).resolve() if args.keep_logs else \
        Path(tempfile.mkdtemp(prefix="bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    workers = len(topology.dcs) * args.workers_per_dc
    links = [] if args.chaos_loopback else [(link.a, link.b) for link in topology.links]
    faults = schedule(args.chaos, args.every, args.duration, args.chaos_seed, topology.dcs,
                      args.workers_per_dc, links, scheduler_dc="")
    fault_log = FaultLog(args.chaos_log or logs / "chaos.jsonl",
                         echo=lambda r: r["event"] != "schedule" and print(
                             f"bench: chaos: {json.dumps(r)}", flush=True))
    wan_cm = LoopbackWan(topology) if args.chaos_loopback else wanlib.EmulatedWan(topology)
    try:
        with interrupts_raise(), wan_cm as wan:
            print(f"bench: running {name} fault-free ...", flush=True)
            clean = _one_run(args, wan, topology, name, logs / f"{name}-fault-free",
                             logs / f"{name}-fault-free.log")
            print(f"bench: running {name} with {len(faults)} faults, one every "
                  f"{args.every:g}s ...", flush=True)
            faulty = _one_run(args, wan, topology, name, logs / f"{name}-chaos",
                              logs / f"{name}-chaos.log", faults, fault_log)
    except wanlib.WanUnavailable as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench: interrupted; every fault was undone, the WAN and every process torn "
              "down", file=sys.stderr)
        return 130
    finally:
        fault_log.close()
    result = {"system": name, "topology": topology.name, "workers_per_dc": args.workers_per_dc,
              "sync": SYNCED.get(name, "fsa"), "every_s": args.every,
              "duration_s": args.duration, "seed": args.chaos_seed,
              "kinds": [dataclasses.asdict(k) for k in args.chaos],
              "schedule": [f.record() for f in faults],
              "fault_free": _figures(clean, workers), "chaos": _figures(faulty, workers),
              "faults": _recoveries(faulty), "skipped": faulty["skipped"],
              "curves": {"fault_free": _curve(clean), "chaos": _curve(faulty)}}
    result["by_kind"] = summarize_recoveries(result["faults"])
    base, hit = result["fault_free"]["goodput"], result["chaos"]["goodput"]
    result["goodput_ratio"] = round(hit / base, 4) if base else None
    print(chaos_report.table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.plot:
        print("plot:", chaos_report.plot(result, args.plot))
    print(f"logs: {logs}")
    ok = clean["code"] == 0 and faulty["code"] == 0 and \
        result["chaos"]["lost_or_doubled"]["total"] == 0
    return 0 if ok else 1


def _curve(run: dict) -> list:
    """``[(seconds since the run's first step, step, quality)]`` from rank 0's
    evaluations as they arrived."""
    first = run["steps"][0][1] if run["steps"] else run["started"]
    return [[round(t - first, 2), step, value] for t, step, value in run["evals"]]
