"""Where a benchmark run's CPU went: seconds per kind of process, and the kernel's share.

:class:`RoleCpu` samples every process the benchmark started (its descendants) in a
background thread and keeps the newest reading of each, so that a process that exits
before the run ends still counts. A process's role comes from its command line (netstorm's
``python -m netstorm.geoserver`` / ``netstorm.scheduler`` / the bench worker) or, for stock
MXNet's nodes (``python -c "import mxnet"``), from its ``DMLC_ROLE``. Per role it sums user
and system seconds and minor page faults (``/proc/<pid>/stat``); beside them, the machine's
softirq seconds (where the kernel's network stack and tc's shaping run, charged to no
process) over the same interval, and the whole machine's busy seconds.

Readings are kept as a time series, so :meth:`RoleCpu.summary` can take the steady state
alone: the interval of the measured iterations (start-up, MXNet's import and the warm-up
iteration left out), to within one sampling period at each end. That answers "CPU per
byte" (docs/benchmarks.md, issue 17): every figure is per iteration, and :func:`per_gb`
divides by the bytes the workers synchronized.
"""
from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field

import psutil

__all__ = ["ROLES", "RoleCpu", "cpu_by_role", "describe", "measured_window", "per_gb", "role_of"]

ROLES = ("worker", "server", "scheduler", "scraper", "other")


def role_of(proc: psutil.Process) -> str | None:
    """"worker", "server", "scheduler", "scraper" or "other" (a helper: a launcher, ``ip``); None when
    the process is gone."""
    try:
        cmdline = " ".join(proc.cmdline())
        if "netstorm.geoserver" in cmdline:
            return "server"
        if "netstorm.scheduler" in cmdline:
            return "scheduler"
        if "netstorm.bench.worker" in cmdline:
            return "worker"
        if "netstorm.bench.scraper" in cmdline:     # netstorm-fapt-observed's readers
            return "scraper"
        if "import mxnet" in cmdline:
            role = proc.environ().get("DMLC_ROLE", "")
            return role if role in ROLES else "other"
        return "other"
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _faults(pid: int) -> int:
    """Minor page faults of ``pid`` so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[7])       # minflt: field 10 of proc(5), 8th after the name
    except (OSError, IndexError, ValueError):
        return 0


@dataclass
class RoleCpu:
    """Samples the descendants of this process every ``period_s`` (see module doc)."""

    period_s: float = 0.25
    readings: dict = field(default_factory=dict)    # pid -> (role, user, system, faults)
    series: list = field(default_factory=list)      # (monotonic s, {role: [u, s, f]},
                                                    #  softirq s, machine busy s)

    def __enter__(self):
        self._me = psutil.Process()
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="role-cpu")
        self._thread.start()
        return self

    def _sample(self) -> None:
        for proc in self._me.children(recursive=True):
            known = self.readings.get(proc.pid)
            # "other" may be a child seen between its fork and its exec: asked again
            role = known[0] if known and known[0] != "other" else role_of(proc)
            if role is None:
                continue
            try:
                times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            self.readings[proc.pid] = (role, times.user + times.children_user,
                                       times.system + times.children_system, _faults(proc.pid))
        totals = {}
        for role, user, system, faults in self.readings.values():
            t = totals.setdefault(role, [0.0, 0.0, 0])
            t[0] += user
            t[1] += system
            t[2] += faults
        machine = psutil.cpu_times()
        busy = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0) - \
            getattr(machine, "guest", 0.0) - getattr(machine, "guest_nice", 0.0)
        self.series.append((time.monotonic(), totals, getattr(machine, "softirq", 0.0), busy))

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()

    def summary(self, iterations: int, start: float | None = None,
                end: float | None = None) -> dict:
        """Per role: user and system CPU seconds and minor page faults per iteration over
        the monotonic interval [``start``, ``end``] (None: the whole run), widened to the
        samples around it, which holds ``iterations`` iterations; ``total_s``: the roles'
        sum; ``softirq_s``: the machine's softirq seconds per iteration (mostly charged to
        the processes it interrupted already, the rest to the kernel's ksoftirqd threads);
        ``machine_s``: the whole machine's busy seconds per iteration (everything but idle:
        the kernel's threads too); ``span_s``: the seconds measured.
        O(roles + log samples)."""
        times = [row[0] for row in self.series]
        first = 0 if start is None else max(0, bisect.bisect_right(times, start) - 1)
        last = len(times) - 1 if end is None else min(len(times) - 1,
                                                      bisect.bisect_left(times, end))
        (t0, before, soft0, busy0), (t1, after, soft1, busy1) = \
            self.series[first], self.series[last]
        n = max(1, iterations)
        out = {}
        for role in ROLES:
            if role in after:
                b = before.get(role, [0.0, 0.0, 0])
                a = after[role]
                out[role] = {"user_s": round((a[0] - b[0]) / n, 3),
                             "system_s": round((a[1] - b[1]) / n, 3),
                             "faults": int((a[2] - b[2]) / n),
                             "processes": sum(r[0] == role for r in self.readings.values())}
        out["total_s"] = round(sum(v["user_s"] + v["system_s"] for v in out.values()), 3)
        out["softirq_s"] = round((soft1 - soft0) / n, 3)
        out["machine_s"] = round((busy1 - busy0) / n, 3)
        out["span_s"] = round(t1 - t0, 2)
        return out


def per_gb(summary: dict, model_bytes: int) -> float:
    """The machine's CPU seconds per GB of model synchronized: ``summary['machine_s']``
    (per iteration, which synchronizes the model once) over the model's GB."""
    return round(summary["machine_s"] / (model_bytes / 1e9), 2) if model_bytes else 0.0


def describe(summary: dict) -> str:
    """One line: the CPU seconds per iteration of each role, softirq, and the total."""
    parts = [f"{role} {summary[role]['user_s'] + summary[role]['system_s']:.2f}"
             f" ({summary[role]['system_s']:.2f} sys)" for role in ROLES if role in summary]
    return ", ".join(parts) + f" = {summary['total_s']:.2f} CPU-s/iter (machine " \
        f"{summary['machine_s']:.2f}, of it softirq {summary['softirq_s']:.2f})"


def measured_window(result: dict):
    """``(iterations, start, end)`` of the measured iterations (the warm-up left out, in
    monotonic seconds) when the workers said when each began (comm mode; ``result``: what
    :func:`~netstorm.bench.measure.collect` read), else None."""
    starts, lasted = result.get("_iter_start"), result.get("_iter_all_s")
    if starts and lasted and len(starts) > 1:
        return len(starts) - 1, starts[1], starts[-1] + lasted[-1]
    return None


def cpu_by_role(roles: RoleCpu, result: dict, iterations: int) -> dict:
    """The ``cpu`` figures of one system's run: over its :func:`measured_window` when
    there is one, else over the whole run (start-up too)."""
    window = measured_window(result)
    if window is not None:
        summary = roles.summary(*window)
        summary["steady_state"] = True
    else:
        summary = roles.summary(iterations)
        summary["steady_state"] = False
    return {"cpu": summary,
            "cpu_s_per_model_gb": per_gb(summary, result.get("model_bytes", 0))}
