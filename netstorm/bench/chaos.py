"""The chaos benchmark's hands: inject each scheduled fault into a running cluster and undo
what lasts (netstorm.bench.chaos_spec says which and when).

* ``server``, ``worker``, ``scheduler``: SIGKILL the process, found in the launcher's
  process table (``Launcher.procs``: ``server dc3``, ``worker dc3/1``, ``scheduler``; a
  restarted process replaces its entry, so the live one is always the one signalled).
* ``dc-stop``: SIGSTOP the DC's server and every worker of it, SIGCONT after the length.
* ``link-cut``: every packet leaving either end of the link's veth pair is dropped
  (``iptables -I OUTPUT/FORWARD -o VETH -j DROP`` inside each end's namespace: sent or
  routed through; tc's drop action is not in every kernel), removed after the length.

Every fault's injection and undo are JSON lines (:class:`FaultLog`). :meth:`Injector.undo_all`
undoes whatever still lasts (SIGCONT, filters removed); :class:`FaultLoop` calls it when it
stops, whatever stopped it (the run's end, an error, Ctrl-C). O(processes) per fault.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

from .chaos_spec import Fault

__all__ = ["CUT_CHAINS", "FaultLog", "FaultLoop", "Injector", "InjectionError"]

CUT_CHAINS = ("OUTPUT", "FORWARD")      # what a DC sends, what it routes to another
COMMAND_TIMEOUT_S = 10.0


class InjectionError(RuntimeError):
    """A fault could not be injected (its target is gone, iptables failed); the
    message names the fault."""


class FaultLog:
    """JSON lines, one per event (``schedule``, ``inject``, ``undo``, ``skip``), each with
    the wall time ``t`` (UNIX seconds); kept in memory too (``records``)."""

    def __init__(self, path=None, echo=None):
        self.records: list = []
        self._file = open(path, "a") if path else None    # noqa: SIM115 (closed in close)
        self._echo = echo
        self._lock = threading.Lock()

    def write(self, event: str, **fields) -> dict:
        record = {"event": event, "t": round(time.time(), 3), **fields}
        with self._lock:
            self.records.append(record)
            if self._file is not None:
                self._file.write(json.dumps(record) + "\n")
                self._file.flush()
        if self._echo is not None:
            self._echo(record)
        return record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Injector:
    """Injects faults into the cluster whose :class:`~netstorm.launcher.Launcher` is
    ``launcher()`` (a callable: a whole-cluster restart makes a new one), on ``wan`` (an
    EmulatedWan with ``link_devices()``, or None on loopback: no link cuts)."""

    def __init__(self, launcher, wan=None, log: FaultLog | None = None):
        self._launcher = launcher
        self._wan = wan
        self.log = log or FaultLog()
        self._stopped: dict = {}        # fault index -> pids SIGSTOPped
        self._cuts: dict = {}           # fault index -> [(namespace, device)]

    def _procs(self) -> list:
        launcher = self._launcher()
        return [] if launcher is None else \
            [p for p in list(launcher.procs) if p.popen.poll() is None]

    def _named(self, name: str):
        found = [p for p in self._procs() if p.name == name]
        if not found:
            raise InjectionError(f"no live process {name!r} in the launcher's table")
        return found[0]

    def inject(self, fault: Fault) -> dict:
        """Inject ``fault`` now; its ``inject`` record (pids, devices)."""
        if fault.kind in ("server", "worker", "scheduler"):
            name = "scheduler" if fault.kind == "scheduler" else f"{fault.kind} {fault.target}"
            proc = self._named(name)
            os.kill(proc.popen.pid, signal.SIGKILL)
            return self.log.write("inject", **fault.record(), pids=[proc.popen.pid])
        if fault.kind == "dc-stop":
            procs = [p for p in self._procs() if p.name == f"server {fault.target}"
                     or p.name.startswith(f"worker {fault.target}/")]
            if not procs:
                raise InjectionError(f"dc-stop {fault.target}: none of its processes is live")
            pids = [p.popen.pid for p in procs]
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            self._stopped[fault.index] = pids
            return self.log.write("inject", **fault.record(), pids=pids)
        if fault.kind == "link-cut":
            devices = self._link_devices(fault.target)
            self._cuts[fault.index] = []
            try:
                for namespace, device in devices:
                    for chain in CUT_CHAINS:
                        _iptables(namespace, "-I", chain, device)
                        self._cuts[fault.index].append((namespace, chain, device))
            except InjectionError:
                self.undo(fault)        # the rules already in: a half cut is no cut
                raise
            return self.log.write("inject", **fault.record(),
                                  devices=[f"{n}:{d}" for n, d in devices])
        raise InjectionError(f"unknown fault kind {fault.kind!r}")

    def _link_devices(self, target: str) -> list:
        if self._wan is None or not hasattr(self._wan, "link_devices"):
            raise InjectionError(f"link-cut {target}: needs the emulated WAN")
        a, _, b = target.partition("-")
        table = self._wan.link_devices()
        if (a, b) not in table or (b, a) not in table:
            raise InjectionError(f"link-cut {target}: no such link on this WAN")
        return [table[(a, b)], table[(b, a)]]

    def undo(self, fault: Fault) -> dict | None:
        """Undo what ``fault`` left (SIGCONT, the drop filters); its ``undo`` record, or
        None if nothing was left to undo. A process that died meanwhile is skipped."""
        pids = self._stopped.pop(fault.index, None)
        cuts = self._cuts.pop(fault.index, None)
        if pids is None and cuts is None:
            return None
        for pid in pids or ():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        for namespace, chain, device in cuts or ():
            _iptables(namespace, "-D", chain, device, check=False)
        return self.log.write("undo", index=fault.index, kind=fault.kind, target=fault.target)

    def undo_all(self, faults) -> None:
        """Undo every fault that still lasts (at the end, always)."""
        for fault in faults:
            self.undo(fault)


def _iptables(namespace: str, verb: str, chain: str, device: str, check: bool = True) -> None:
    """Insert (``-I``) or delete (``-D``) the rule dropping what leaves ``device`` in
    ``chain``, inside ``namespace``."""
    argv = ["ip", "netns", "exec", namespace, "iptables", verb, chain, "-o", device, "-j",
            "DROP"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        if check:
            raise InjectionError(f"{' '.join(argv)} failed: {exc}") from exc
        return
    if check and done.returncode != 0:
        raise InjectionError(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()}")


class FaultLoop:
    """A thread that injects ``faults`` at their times (``at_s`` after :meth:`begin`) and
    undoes the lasting ones after their length; :meth:`stop` (or leaving the ``with``)
    ends it and undoes whatever still lasts. Sleeps on an Event (no polling); a fault
    that cannot be injected is logged (``skip``, with why) and the loop goes on."""

    def __init__(self, injector: Injector, faults):
        self.injector = injector
        self.faults = list(faults)
        self._stop = threading.Event()
        self._begun = threading.Event()
        self.began_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="chaos", daemon=True)

    def __enter__(self) -> "FaultLoop":
        for fault in self.faults:
            self.injector.log.write("schedule", **fault.record())
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def begin(self) -> None:
        """Start the clock (the faulty run's first step ended); once."""
        if not self._begun.is_set():
            self.began_at = time.time()
            self._begun.set()

    def stop(self) -> None:
        self._stop.set()
        self._begun.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self.injector.undo_all(self.faults)

    def _run(self) -> None:
        self._begun.wait()
        if self.began_at is None:       # stopped before the run's first step
            return
        timeline = sorted([(f.at_s, 0, f) for f in self.faults]
                          + [(f.at_s + f.length_s, 1, f) for f in self.faults if f.length_s],
                          key=lambda e: (e[0], e[1]))
        injected: set = set()
        for at_s, is_undo, fault in timeline:
            if self._stop.wait(max(0.0, self.began_at + at_s - time.time())):
                return
            if is_undo:
                if fault.index in injected:
                    self.injector.undo(fault)
                continue
            try:
                self.injector.inject(fault)
                injected.add(fault.index)
            except (InjectionError, OSError, subprocess.SubprocessError) as exc:
                self.injector.log.write("skip", **fault.record(), why=str(exc))
