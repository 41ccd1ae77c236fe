"""Where the machine's CPU goes during a benchmark, by kind of work: ``bench.py --perf``.

Linux ``perf`` samples every CPU (``perf record -a -g -e cpu-clock``: a software clock, so it
works in VMs without hardware counters; time stamps on ``CLOCK_MONOTONIC``, the workers'
clock) from the end of a system's warm-up iteration until the system finishes;
:func:`classify` keeps the samples of the measured iterations, leaves out idle CPUs, and puts
every other sample in one bucket by its call stack:

* kernel work on behalf of a call: ``TCP send``, ``TCP receive`` (every TCP socket, the
  emulated WAN's and loopback's), ``same-host socket`` (a worker's ``ipc://`` hop: Unix
  sockets), ``page faults``, ``poll and wake-ups`` (poll, epoll, futex: threads waiting
  for and waking each other);
* ``network softirq``: the kernel's network stack and the emulator's shaping outside any
  call (in ksoftirqd or interrupting a process);
* user space by library: ``Python``, ``CURVE`` (libsodium), ``bulk AEAD`` (libsodium's
  AEGIS: the bulk channel), ``data plane`` (the compiled core's own code), ``ZeroMQ``,
  ``numpy``, ``MXNet``, ``libc`` (copies, malloc), and ``other``.

:func:`per_iteration` turns bucket shares into CPU seconds per iteration with the machine's
busy seconds per iteration (:mod:`netstorm.bench.cpu`). The samples cover all processes on
the machine; on this benchmark's otherwise idle machine they are the run's.
"""
from __future__ import annotations

import collections
import shutil
import signal
import subprocess
from pathlib import Path

__all__ = ["BUCKETS", "KERNEL_MARKS", "Recorder", "SAMPLE_HZ", "USER_LIBRARIES", "bucket",
           "classify", "cpu_profile", "describe", "per_iteration", "unavailable"]

SAMPLE_HZ = 250
# (bucket, what marks it in a stack), searched in this order in every sample's frames
KERNEL_MARKS = (("TCP send", "tcp_sendmsg"), ("TCP receive", "tcp_recvmsg"),
                ("same-host socket", "unix_stream_"), ("page faults", "asm_exc_page_fault"),
                ("poll and wake-ups", "__x64_sys_poll"),
                ("poll and wake-ups", "__x64_sys_epoll_wait"),
                ("poll and wake-ups", "__x64_sys_futex"),
                ("poll and wake-ups", "__x64_sys_ppoll"))
USER_LIBRARIES = (("bulk AEAD", "aegis"), ("CURVE", "sodium"), ("data plane", "_dataplane"),
                  ("Python", "libpython"), ("ZeroMQ", "libzmq"),
                  ("ZeroMQ", "_zmq."), ("numpy", "numpy"), ("numpy", "_multiarray"),
                  ("MXNet", "mxnet"), ("libc", "libc.so"))
BUCKETS = ("TCP send", "TCP receive", "same-host socket", "page faults", "poll and wake-ups",
           "network softirq", "other kernel", "Python", "CURVE", "bulk AEAD", "data plane",
           "ZeroMQ", "numpy", "MXNet",
           "libc", "other")


def unavailable() -> str:
    """Why ``perf`` cannot sample here ("" when it can)."""
    if shutil.which("perf") is None:
        return "perf is not installed (Debian: apt install linux-perf)"
    probe = subprocess.run(["perf", "record", "-a", "-e", "cpu-clock", "-o", "/dev/null",
                            "--", "true"], capture_output=True, text=True)
    return "" if probe.returncode == 0 else \
        f"perf record -a fails here: {probe.stderr.strip()[-200:]}"


class Recorder:
    """``perf record`` of the whole machine from :meth:`start` to :meth:`stop`."""

    def __init__(self, path: Path):
        self.path = path
        self._proc = None

    def start(self) -> None:
        if self._proc is None:
            self._proc = subprocess.Popen(
                ["perf", "record", "-a", "-g", "-e", "cpu-clock", "-F", str(SAMPLE_HZ),
                 "-k", "CLOCK_MONOTONIC", "-o", str(self.path)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> bool:
        """Stop recording; whether anything was recorded."""
        if self._proc is None:
            return False
        self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        return self.path.exists()


def bucket(comm: str, frames: list) -> str:
    """The bucket of one sample ("idle" for an idle CPU): ``comm`` is its thread's name,
    ``frames`` its stack, innermost first, each ``"symbol (library)"``."""
    if comm.startswith("swapper") and any("do_idle" in f for f in frames):
        return "idle"
    for name, mark in KERNEL_MARKS:
        if any(mark in f for f in frames):
            return name
    if comm.startswith("ksoftirqd") or any("handle_softirqs" in f or "net_rx_action" in f
                                           for f in frames):
        return "network softirq"
    top = frames[0] if frames else ""
    if "kernel.kallsyms" in top:
        return "other kernel"
    return next((name for name, mark in USER_LIBRARIES if mark in top), "other")


def classify(path: Path, start: float | None = None, end: float | None = None) -> dict:
    """Share of the busy samples in each bucket (``{bucket: fraction}``), their number
    (``samples``) and the idle share of all (``idle``), from ``perf script``'s output of
    the recording at ``path``; only samples from ``start`` to ``end`` (monotonic seconds;
    None: no bound). O(samples)."""
    out = subprocess.run(["perf", "script", "-i", str(path), "-F", "comm,time,ip,sym,dso"],
                         capture_output=True, text=True).stdout
    counts = collections.Counter()
    for block in out.split("\n\n"):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        head = lines[0].rsplit(None, 1)
        try:
            when = float(head[-1].rstrip(":"))
        except ValueError:
            continue
        if (start is not None and when < start) or (end is not None and when > end):
            continue
        frames = [line.split(None, 1)[1] if " " in line else line for line in lines[1:]]
        counts[bucket(head[0] if len(head) > 1 else "", frames)] += 1
    idle = counts.pop("idle", 0)
    busy = sum(counts.values())
    shares = {name: round(counts[name] / busy, 4) for name in BUCKETS if counts[name]} \
        if busy else {}
    return {"samples": busy, "shares": shares,
            "idle": round(idle / (idle + busy), 4) if idle + busy else 0.0}


def cpu_profile(path: Path, window, machine_s: float) -> dict:
    """The ``cpu_profile`` figures of one system's run: the recording at ``path``
    classified over ``window`` (``(iterations, start, end)``, see
    :func:`netstorm.bench.cpu.measured_window`; None: all of it), in CPU seconds per
    iteration of the machine's ``machine_s``."""
    profile = classify(path, *(window[1:] if window else ()))
    return {"samples": profile["samples"],
            "cpu_s_per_iter": per_iteration(profile, machine_s)}


def per_iteration(profile: dict, machine_s: float) -> dict:
    """``{bucket: CPU seconds per iteration}``: each bucket's share of ``machine_s``, the
    machine's busy seconds per iteration."""
    return {name: round(share * machine_s, 3) for name, share in profile["shares"].items()}


def describe(seconds: dict) -> str:
    """One line, largest first."""
    return ", ".join(f"{name} {s:.2f}" for name, s in
                     sorted(seconds.items(), key=lambda kv: -kv[1]) if s >= 0.005)
