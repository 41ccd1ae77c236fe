"""Each DC server's CPU per WAN byte: N DC servers on loopback, beside a ps-lite server.

    python scripts/server_throughput.py --wan-dcs 2 --iters 10 --repeat 2

N DCs (dc0..), one worker each, all on this host: a netstorm cluster with ``policy =
"fapt"`` and ``trees = "shared"`` over a declared full mesh of equal loopback links (so
the planner roots trees in several DCs and nothing is measured at start-up), its servers
exchanging every iteration's model chunks along those trees; CURVE on unless
``--no-curve``. Each worker pushes and pulls a gluon model_zoo model (comm mode of
:mod:`netstorm.bench.worker`) ``--iters`` times after a warm-up. Each run sets the
cluster file's ``[transport] dataplane`` to one of ``--dataplanes``; with ``--repeat K``
the order of the dataplanes alternates from one repetition to the next.

Per DC server, over the measured iterations only (the warm-up and start-up left out):

* CPU seconds: user + system time of the server process (psutil), sampled every 0.25 s
  and interpolated linearly to the workers' first measured start and last end;
* WAN bytes: what it sent to other servers plus what it received from them. A server says
  what it sent when it shuts down (``WAN chunks sent {... 'bytes': N}``, every round's, the
  warm-up's too; each round sends the same dense chunks, so the measured rounds' share is
  ``iters / (iters + 1)``). Nothing counts received bytes, but under shared trees each tree
  edge carries one chunk up and its total down, so every server receives exactly what it
  sends; the run checks the sum, ``tree_bytes_ratio`` = (bytes all servers sent) /
  ((iters + 1) * 2 (N - 1) * model bytes), which is 1 when every chunk crossed every edge
  of a spanning tree once each way;
* CPU-s per WAN GB and WAN GB/s (bytes over the measured wall time).

A DC server also serves its own worker (one push and one pull of the model per iteration,
over shared memory): that CPU is in its figure, as it is in a deployment.

Beside it, once per repetition, ps-lite (stock MXNet ``dist_sync``, one server, N workers)
does the same iterations; its server's figure counts the bytes it takes in and gives out,
2 * N * model bytes per iteration, with the same CPU sampling. O(N) processes per run.
"""
from __future__ import annotations

import argparse
import bisect
import json
import re
import statistics
from pathlib import Path

import psutil

from netstorm.geoserver.config.cluster import ClusterConfig, ClusterFileError, parse_cluster
from netstorm.geoserver.config.settings import DATAPLANES
from netstorm.launcher import free_port, run_cluster

from .cli import Progress
from .cpu import RoleCpu, measured_window
from .measure import collect
from .throughput import _command, run_system

__all__ = ["LINK_MBPS", "ServerCpu", "add_arguments", "check_arguments",
           "cluster_table", "interpolate", "measure_wan", "pslite_figures", "run_order",
           "server_figures", "shutdown_sent", "summarize", "table_wan", "wan_config"]

LINK_MBPS = 10000.0     # the declared loopback links: equal rates, for the planner only
SOURCE = "<server_throughput --wan-dcs>"

_SENT = re.compile(r"^\[server (\S+)\] .*WAN chunks sent \{[^}]*'bytes': (\d+)")
_POLICY = re.compile(r"cluster complete: .*; policy (.*)$", re.MULTILINE)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The WAN mode's flags, on ``scripts/server_throughput.py``'s parser."""
    g = p.add_argument_group("WAN mode (--wan-dcs)")
    g.add_argument("--wan-dcs", type=int, default=0, metavar="N",
                   help="run N DC servers (one worker each) exchanging along fapt trees on "
                        "loopback, and report each server's CPU-s per WAN GB")
    g.add_argument("--dataplanes", default=None,
                   help=f"comma-separated [transport] dataplane values, one run each per "
                        f"repetition, order alternating (default: python,native; from: "
                        f"{', '.join(DATAPLANES)})")
    g.add_argument("--repeat", type=int, default=None, metavar="K",
                   help="repetitions (default 1)")
    g.add_argument("--curve", action=argparse.BooleanOptionalAction, default=True,
                   help="CURVE encryption between the nodes (default: on)")


def check_arguments(p: argparse.ArgumentParser, args) -> None:
    """Refuse flags that do not go together (``p.error`` names the flag); fill defaults."""
    if not args.wan_dcs:
        for flag, value in (("--dataplanes", args.dataplanes), ("--repeat", args.repeat),
                            ("--no-curve", not args.curve)):
            if value:
                p.error(f"{flag} needs --wan-dcs")
        return
    if args.wan_dcs < 2:
        p.error(f"--wan-dcs must be >= 2 (got {args.wan_dcs}): one DC has no WAN")
    if args.workers is not None:
        p.error("--workers: not with --wan-dcs (each DC has one worker; ps-lite runs with "
                "as many)")
    if args.perf:
        p.error("--perf: not with --wan-dcs")
    args.dataplanes = [d for d in (args.dataplanes or "python,native").split(",") if d]
    unknown = [d for d in args.dataplanes if d not in DATAPLANES]
    if unknown or not args.dataplanes:
        p.error(f"--dataplanes: unknown {unknown}; known: {', '.join(DATAPLANES)}")
    args.repeat = 1 if args.repeat is None else args.repeat
    if args.repeat < 1:
        p.error("--repeat must be >= 1")


def run_order(dataplanes, repeat: int) -> list:
    """``(repetition, dataplane)`` of every run: the dataplanes in the given order in even
    repetitions, reversed in odd ones (neither always runs first). O(runs)."""
    return [(k, d) for k in range(repeat)
            for d in (dataplanes if k % 2 == 0 else list(reversed(dataplanes)))]


def cluster_table(dcs: int, dataplane: str, curve: bool, scheduler_port: int,
                  link_mbps: float = LINK_MBPS) -> dict:
    """The cluster file (as a parsed TOML table) of one run: ``dcs`` DCs dc0.. on loopback,
    one worker each, fapt over shared trees on a full mesh of ``link_mbps`` links. O(dcs^2)."""
    names = [f"dc{i}" for i in range(dcs)]
    return {"scheduler": {"host": "127.0.0.1", "port": scheduler_port},
            "dc": [{"name": n, "host": "127.0.0.1", "server_port": 0, "workers": 1}
                   for n in names],
            "transport": {"timeout_s": 600.0, "dataplane": dataplane},
            "wan": {"policy": "fapt", "trees": "shared", "adapt": False},
            "link": [{"a": a, "b": b, "mbps": link_mbps}
                     for i, a in enumerate(names) for b in names[i + 1:]],
            "security": {"curve": curve}}


def wan_config(dcs: int, dataplane: str, curve: bool) -> ClusterConfig:
    """:func:`cluster_table` read as the launcher reads a cluster file (a free scheduler
    port); :class:`ClusterFileError` if this netstorm does not know a field."""
    return parse_cluster(cluster_table(dcs, dataplane, curve, free_port()), source=SOURCE)


def shutdown_sent(log_text: str) -> dict:
    """``{dc: bytes}`` each server said it sent over the WAN, from its shutdown line
    (launcher-prefixed ``[server dcX]``). O(lines)."""
    return {m.group(1): int(m.group(2)) for m in map(_SENT.match, log_text.splitlines()) if m}


def interpolate(times: list, values: list, t: float) -> float:
    """``values`` (samples at increasing ``times``) at ``t``, linearly; clamped at both
    ends. O(log samples)."""
    i = bisect.bisect_right(times, t)
    if i == 0:
        return values[0]
    if i == len(times):
        return values[-1]
    t0, t1 = times[i - 1], times[i]
    share = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
    return values[i - 1] + share * (values[i] - values[i - 1])


# A process's CPU counters in /proc advance in clock ticks (10 ms): less CPU than that over
# the measured window is below what can be read, and no CPU per byte is given for it.
CPU_TICK_S = 0.01
# How often the servers' CPU is read: short against the measured window (tens of ms per
# iteration on loopback), cheap for the few processes of one run.
SAMPLE_PERIOD_S = 0.05


def server_figures(cpu_s: float, nbytes: float, window_s: float, wan: bool = True) -> dict:
    """One server's figures over a window of ``window_s`` in which it spent ``cpu_s`` CPU
    seconds and moved ``nbytes`` (sent + received); ``wan``: the keys say WAN (a netstorm
    server's peers) or not (ps-lite's server: its workers). CPU per GB is None when
    ``cpu_s`` is below one clock tick (:data:`CPU_TICK_S`): the window was too short."""
    gb, w = nbytes / 1e9, "wan_" if wan else ""
    measurable = gb and cpu_s >= CPU_TICK_S
    return {"cpu_s": round(cpu_s, 4), f"{w}bytes": int(nbytes),
            f"cpu_s_per_{w}gb": round(cpu_s / gb, 3) if measurable else None,
            f"{w}gb_per_s": round(gb / window_s, 4) if window_s > 0 else None}


class ServerCpu(RoleCpu):
    """:class:`~netstorm.bench.cpu.RoleCpu` that also keeps each server process's own CPU
    seconds (user + system) per sample, labelled by its DC (``--dc``; ps-lite's server:
    ``"server"``)."""

    def __enter__(self):
        self.labels, self.per_server = {}, []
        return super().__enter__()

    def _label(self, pid: int) -> str | None:
        if pid not in self.labels:
            try:
                argv = psutil.Process(pid).cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                return None
            self.labels[pid] = argv[argv.index("--dc") + 1] if "--dc" in argv[:-1] \
                else "server"
        return self.labels[pid]

    def _sample(self) -> None:
        super()._sample()
        now = {}
        for pid, (role, user, system, _faults) in self.readings.items():
            label = self._label(pid) if role == "server" else None
            if label is not None:
                now[label] = now.get(label, 0.0) + user + system
        self.per_server.append((self.series[-1][0], now))

    def between(self, start: float, end: float) -> dict:
        """``{label: CPU seconds}`` each server spent between the monotonic ``start`` and
        ``end``, interpolated between samples. O(labels * samples)."""
        times = [t for t, _ in self.per_server]
        labels = {label for _, now in self.per_server for label in now}
        out = {}
        for label in sorted(labels):
            values = [now.get(label, 0.0) for _, now in self.per_server]
            out[label] = interpolate(times, values, end) - interpolate(times, values, start)
        return out


def _run(name: str, logs: Path, start) -> tuple:
    """Run ``start(out, log)`` under a :class:`ServerCpu`: ``(exit code, what the workers
    measured, the sampler, the log's text)``."""
    out, path = logs / name, logs / f"{name}.log"
    out.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as log, ServerCpu(period_s=SAMPLE_PERIOD_S) as cpu:
        code = start(out, Progress(log, name))
    return code, collect(out, "comm"), cpu, path.read_text()


def _failed(code: int, r: dict, path: Path, why: str = "") -> dict:
    return {"correct": False, "exit_code": code,
            "error": why or r.get("error") or f"see {path}"}


def pslite_figures(dcs: int, model: str, iters: int, logs: Path, name: str) -> dict:
    """ps-lite's one server with ``dcs`` workers (see the module doc)."""
    code, r, cpu, _ = _run(name, logs, lambda out, log:
                           run_system("pslite", dcs, model, iters, out, log))
    window = measured_window(r)
    if code != 0 or not r.get("correct") or window is None:
        return _failed(code, r, logs / f"{name}.log")
    n, start, end = window
    cpu_s = sum(cpu.between(start, end).values())
    return {"correct": True, "exit_code": 0, "workers": dcs, "median_s": r["median_s"],
            "model_bytes": r["model_bytes"],
            **server_figures(cpu_s, 2 * dcs * r["model_bytes"] * n, end - start, wan=False)}


def _wan_problem(code: int, r: dict, window, missing: list, sent: dict, dataplane: str,
                 path: Path) -> str | None:
    """Why a netstorm run has no figures ("": see its log), or None when it has."""
    if code != 0 or not r.get("correct") or window is None:
        return ""
    if missing:
        return f"no shutdown line of {missing} in {path}"
    if not sum(sent.values()):
        return f"the servers said they sent no WAN bytes (dataplane {dataplane}); see {path}"
    return None


def wan_figures(dcs: int, dataplane: str, curve: bool, model: str, iters: int, logs: Path,
                name: str) -> dict:
    """One netstorm run of ``dcs`` DCs on ``dataplane`` (see the module doc)."""
    try:
        config = wan_config(dcs, dataplane, curve)
    except ClusterFileError as exc:     # e.g. a netstorm without [transport] dataplane
        return {"correct": False, "exit_code": None, "error": str(exc)}
    command = _command(logs / name, model, iters, "netstorm")
    code, r, cpu, text = _run(name, logs, lambda out, log: run_cluster(config, command,
                                                                        out=log))
    window, sent = measured_window(r), shutdown_sent(text)
    missing = [dc.name for dc in config.dcs if dc.name not in sent]
    problem = _wan_problem(code, r, window, missing, sent, dataplane, logs / f"{name}.log")
    if problem is not None:
        return _failed(code, r, logs / f"{name}.log", problem)
    n, start, end = window
    used = cpu.between(start, end)
    share = n / (iters + 1)              # the measured rounds' part of every round's bytes
    servers = {dc: {"wan_sent_bytes": int(sent[dc] * share),
                    **server_figures(used.get(dc, 0.0), 2 * sent[dc] * share, end - start)}
               for dc in sorted(sent)}
    policy = _POLICY.search(text)
    return {"correct": True, "exit_code": 0, "median_s": r["median_s"],
            "model_bytes": r["model_bytes"], "window_s": round(end - start, 4),
            "policy": policy.group(1) if policy else "",
            "tree_bytes_ratio": round(sum(sent.values()) / (
                (iters + 1) * 2 * (dcs - 1) * r["model_bytes"]), 4),
            "servers": servers,
            "all_servers": server_figures(sum(used.get(dc, 0.0) for dc in sent),
                                          2 * sum(sent.values()) * share, end - start)}


def measure_wan(dcs: int, dataplanes, repeat: int, model: str, iters: int, logs: Path,
                curve: bool = True, pslite: bool = True, netstorm: bool = True) -> list:
    """Every run of :func:`run_order` (and ps-lite once per repetition, first): one record
    per netstorm run, with its repetition's ps-lite figures under ``"pslite"`` (None
    without ``pslite``); without ``netstorm``, one record of ps-lite per repetition."""
    runs, baseline = [], {}
    for k, dataplane in run_order(dataplanes, repeat):
        if pslite and k not in baseline:
            print(f"throughput: repetition {k + 1}/{repeat}: ps-lite, {dcs} workers ...",
                  flush=True)
            baseline[k] = pslite_figures(dcs, model, iters, logs, f"rep{k}-pslite")
        if not netstorm:
            continue
        print(f"throughput: repetition {k + 1}/{repeat}: {dcs} DCs, dataplane {dataplane} "
              f"...", flush=True)
        r = wan_figures(dcs, dataplane, curve, model, iters, logs, f"rep{k}-{dataplane}")
        runs.append({"repetition": k, "dataplane": dataplane, "dcs": dcs, "curve": curve,
                     **r, "pslite": baseline.get(k)})
    return runs or [{"repetition": k, "pslite": b} for k, b in baseline.items()]


def summarize(runs: list) -> dict:
    """Per dataplane, the medians over its correct runs of the servers' combined CPU-s per
    WAN GB and of the mean server's WAN GB/s; ``pslite``: its server's medians."""
    out = {}
    for dataplane in dict.fromkeys(r.get("dataplane") for r in runs if r.get("correct")):
        done = [r for r in runs if r.get("dataplane") == dataplane and r.get("correct")]
        out[dataplane] = {
            "runs": len(done),
            "cpu_s_per_wan_gb": _median(r["all_servers"]["cpu_s_per_wan_gb"] for r in done),
            "wan_gb_per_s_per_server": round(statistics.median(
                statistics.mean(s["wan_gb_per_s"] for s in r["servers"].values())
                for r in done), 4)}
    base = {r["repetition"]: r["pslite"] for r in runs if (r.get("pslite") or {}).get("correct")}
    if base:
        out["pslite"] = {"runs": len(base),
                         "cpu_s_per_gb": _median(b["cpu_s_per_gb"] for b in base.values()),
                         "gb_per_s": statistics.median(b["gb_per_s"] for b in base.values())}
    return out


def _median(values) -> float | None:
    """The median of the values that are not None (None if none is)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _per_gb(value: float | None) -> str:
    return "not measurable (too few --iters)" if value is None else f"{value:.2f}"


def table_wan(runs: list, dcs: int, model: str, iters: int) -> str:
    """A readable table: one row per server per run, ps-lite's server per repetition."""
    lines = [f"{dcs} DC servers on loopback (fapt, shared trees, one worker each), {model}, "
             f"{iters} measured iterations; MB: what each server sent + received over them "
             f"(netstorm: over the WAN; ps-lite: to and from its workers)",
             f"{'rep':<4}{'system':<17}{'server':<8}{'CPU-s':>8}{'MB':>10}"
             f"{'CPU-s/GB':>10}{'GB/s':>8}"]
    shown = set()
    for r in runs:
        k, b = r["repetition"], r.get("pslite")
        if b is not None and k not in shown:
            shown.add(k)
            lines.append(_row(k, "ps-lite", "server", b) if b.get("correct") else
                         f"{k:<4}{'ps-lite':<17}FAILED: {b.get('error')}")
        if "dataplane" not in r:
            continue
        system = f"netstorm {r['dataplane']}"
        if not r.get("correct"):
            lines.append(f"{k:<4}{system:<17}FAILED: {r.get('error')}")
            continue
        for dc, s in r["servers"].items():
            lines.append(_row(k, system, dc, s))
        lines.append(_row(k, system, "all", r["all_servers"]) +
                     f"  tree bytes {r['tree_bytes_ratio']:g}x; {r['policy']}")
    for name, s in summarize(runs).items():
        if name == "pslite":
            lines.append(f"median ps-lite server: {_per_gb(s['cpu_s_per_gb'])} CPU-s/GB, "
                         f"{s['gb_per_s']:.2f} GB/s ({s['runs']} runs)")
        else:
            lines.append(f"median netstorm {name}: {_per_gb(s['cpu_s_per_wan_gb'])} CPU-s per WAN "
                         f"GB (all servers), {s['wan_gb_per_s_per_server']:.2f} WAN GB/s per "
                         f"server ({s['runs']} runs)")
    return "\n".join(lines)


def _row(k: int, system: str, server: str, s: dict) -> str:
    w = "wan_" if "wan_bytes" in s else ""
    per_gb, rate = s[f"cpu_s_per_{w}gb"], s[f"{w}gb_per_s"]
    return (f"{k:<4}{system:<17}{server:<8}{s['cpu_s']:>8.2f}{s[f'{w}bytes'] / 1e6:>10.1f}"
            f"{'-' if per_gb is None else f'{per_gb:.2f}':>10}"
            f"{'-' if rate is None else f'{rate:.2f}':>8}")


def main_wan(args, systems: list, logs: Path) -> int:
    """The WAN mode of ``scripts/server_throughput.py`` (flags already checked)."""
    runs = measure_wan(args.wan_dcs, args.dataplanes, args.repeat, args.model, args.iters,
                       logs, args.curve, "pslite" in systems, "netstorm" in systems)
    print(table_wan(runs, args.wan_dcs, args.model, args.iters))
    print(f"logs: {logs}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"mode": "wan", "dcs": args.wan_dcs, "model": args.model, "iters": args.iters,
             "repeat": args.repeat, "curve": args.curve, "dataplanes": args.dataplanes,
             "runs": runs, "summary": summarize(runs)}, indent=1))
    ok = all(r.get("correct", True) and (r.get("pslite") or {"correct": True})["correct"]
             for r in runs)
    return 0 if ok else 1

