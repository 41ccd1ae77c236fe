"""The child processes of one cluster: :class:`Launcher` starts each one, prefixes every
line of its output with the process's name (and with ``--log-dir`` writes it to that
process's file too: :class:`~.logs.RunLog`), waits for the workers, reports the first
failure (the node that caused it, not the ones that stopped because of it), restarts a
failed worker or server when ``[recovery]`` allows, and always stops every process
(SIGTERM, then SIGKILL to the process group). :class:`Proc` is one process and what it
left behind (its reason file, whether a worker joined). What the processes are is
:mod:`.supervisor`'s business; this module knows only roles. Each event is O(1) but for
the final stop, O(processes).
"""
from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from netstorm.geoserver.cli import StopSignals
from netstorm.geoserver.config.exit_reasons import EXIT_ABORTED, EXIT_LEFT, read_reason, \
    write_reason

from .logs import RunLog

__all__ = ["BLAME_GRACE_S", "FAILURE_END", "LAUNCH_PREFIX", "Launcher", "Proc", "REASON_SHOWN",
           "SHUTDOWN_GRACE_S", "STOP_GRACE_S", "interrupts_raise", "wait_for_exits"]

STOP_GRACE_S = 5.0
SHUTDOWN_GRACE_S = 15.0
BLAME_GRACE_S = 5.0     # after a node stopped because another failed: wait for that one
REASON_SHOWN = 400      # characters of a failed process's reason in the failure line
LAUNCH_PREFIX = "[launch] "             # the launcher's own lines
FAILURE_END = "; stopping the cluster"  # ends the launcher's line naming the failure
JOIN_CHECK_S = 0.25     # elastic: how often the launcher looks whether the workers joined


@dataclass
class Proc:
    name: str
    role: str
    popen: subprocess.Popen
    reader: threading.Thread | None = None
    reason_file: str = ""       # where the process leaves why it failed (netstorm's own)
    joined_file: str = ""       # a worker creates it once it joined the cluster ("": unchecked)
    said: str = ""              # a host's (``--ssh``): its launcher's failure, else last line
    start: tuple = ()           # how it was started (argv, env, wrap): to restart a worker
    restarts: int = 0           # how often it was restarted
    dc: str = ""                # the DC a server or worker belongs to (elastic leaves)

    def reason(self) -> tuple:
        """``(why it failed in its own words, first line, or "", whether it failed because
        another node did)``."""
        if self.role == "host":
            return self.said.removesuffix(FAILURE_END)[:REASON_SHOWN], False
        text, caused_by_other = read_reason(self.reason_file)
        first = text.strip().splitlines()[0][:REASON_SHOWN] if text.strip() else ""
        return first, caused_by_other

    def never_joined(self) -> bool:
        """A worker that was to join the cluster and did not (it never created the store)."""
        return bool(self.joined_file) and not Path(self.joined_file).exists()

    def follows(self, code: int) -> bool:
        """Whether this failure was caused by another node's (its exit code or its
        reason file says so): the launcher then looks for that node first."""
        return code == EXIT_ABORTED and self.role != "worker" or self.reason()[1]


class Launcher:
    """Owns the child processes of one cluster; always tears them all down."""

    def __init__(self, out=None, stop_note: str = "", worker_restarts: int = 0,
                 server_restarts: int = 0, scheduler_restarts: int = 0, min_dcs: int = 0,
                 rejoins: int = 0):
        """``out``: where the lines go, a :class:`~.logs.RunLog` (the console, with
        ``--log-dir`` a file per process, the level) or a stream (the console alone).
        ``stop_note``: a file where the launcher writes why it stops the cluster before
        it signals the processes (a server passes that on to the scheduler, so the other
        hosts learn which node failed, not that a bystander was stopped).
        ``worker_restarts``: how often a failed worker is started again into its rank;
        ``server_restarts``: how often a failed DC server is started again (it takes a
        peer DC's replica); ``scheduler_restarts``: how often a failed scheduler is started
        again (the nodes re-register with it, docs/recovery.md). ``min_dcs``
        (``[elastic]``): a DC whose server or worker fails leaves the run (its other
        processes are stopped) while that many DCs remain, and so does one whose server
        says the scheduler took its DC out (``EXIT_LEFT``: it was stopped or cut off).
        ``rejoins``: how often, in all, a DC that left is started again, once all its
        processes ended, to join the run anew."""
        self.restarts = {"worker": worker_restarts, "server": server_restarts,
                         "scheduler": scheduler_restarts}
        self.min_dcs = min_dcs
        self.left: set = set()          # DCs that left the run (elastic)
        self.rejoins_left = rejoins
        self._rejoining: set = set()    # DCs to start again once their processes ended
        self._join: tuple | None = None  # (seconds, start them, DCs) joining later
        self.procs: list = []
        self.events: "queue.Queue" = queue.Queue()
        self.output = out if isinstance(out, RunLog) else RunLog(out or sys.stdout)
        self.out = self.output.stream
        self.stop_note = stop_note
        self.failure_followed = False   # the failure reported followed another node's
        self.failed_role = ""           # the role of the process whose failure is reported

    def _emit(self, prefix: str, line: str) -> None:
        self.output.emit(prefix, line)

    def _pump(self, proc: Proc) -> None:
        for raw in iter(proc.popen.stdout.readline, b""):
            line = raw.decode("utf-8", "replace")
            self._emit(proc.name, line)
            if proc.role == "host" and line.strip() and not proc.said.endswith(FAILURE_END):
                proc.said = line.strip().removeprefix(LAUNCH_PREFIX)
        self.events.put((proc, proc.popen.wait()))

    def start(self, name: str, role: str, argv: list, env: dict, wrap=None,
              reason_file: str = "", joined_file: str = "", stdin_data: bytes = b"",
              dc: str = "") -> Proc:
        """Start ``argv`` (after ``wrap``) as process ``name``; ``stdin_data``, if any, is
        written to its standard input, which stays open (closing it is how
        :class:`~netstorm.launcher.ssh.SshLauncher` stops a remote host)."""
        full = (wrap or []) + argv
        popen = subprocess.Popen(full, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT,
                                 stdin=subprocess.PIPE if stdin_data else subprocess.DEVNULL,
                                 start_new_session=True, cwd=os.getcwd())
        if stdin_data:
            try:
                popen.stdin.write(stdin_data)
                popen.stdin.flush()
            except BrokenPipeError:     # it exited at once (ssh: host unreachable); its
                pass                    # exit code and output tell why
        proc = Proc(name, role, popen, reason_file=reason_file, joined_file=joined_file,
                    start=(argv, env, wrap), dc=dc)
        self.output.started(name)
        proc.reader = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        proc.reader.start()
        self.procs.append(proc)
        return proc

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, _tb):
        """Always stop every process; an interrupt is reported and propagates."""
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self._emit("launch", f"interrupted ({exc or 'SIGINT'}); stopping the cluster")
        self.stop_all()
        return False

    def stop_all(self) -> None:
        """SIGTERM every live process group, SIGKILL what remains after a grace period."""
        live = [p for p in self.procs if p.popen.poll() is None]
        for p in live:
            _signal_group(p.popen, signal.SIGTERM)
        wait_for_exits(live, STOP_GRACE_S)
        for p in self.procs:
            _signal_group(p.popen, signal.SIGKILL)  # also reaps grandchildren left behind
            try:
                p.popen.wait(2)
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            if p.reader is not None:
                p.reader.join(timeout=2)

    def wait(self, workers_total: int) -> int:
        """Block until the workers finish; return the cluster's exit code.

        A worker's non-zero exit, or any server/scheduler failure, stops the cluster. Servers
        and the scheduler exit 0 only after every worker said goodbye, so a clean exit of
        theirs is never a failure. The failure named is the first that was not a node
        stopping because *another* failed (:meth:`Proc.follows`): after such an exit the
        launcher waits up to :data:`BLAME_GRACE_S` for the node that caused it.
        """
        workers_ok, pending = 0, {p.name for p in self.procs}
        followers, blame_by = [], None      # failures caused by another node's
        join_due = None                     # elastic: when the joining DCs start
        over = False                        # elastic: the scheduler finished the run
        while pending:
            workers_total += self._rejoin_due(pending)
            timeout = SHUTDOWN_GRACE_S if over or workers_total and \
                workers_ok == workers_total else None
            if blame_by is not None:
                timeout = max(0.0, blame_by - time.monotonic())
            joining = self._join is not None or bool(self._rejoining)
            if self._join is not None:      # armed once the workers joined: looked at often
                join_due = self._join_due(pending, join_due)
                wake = JOIN_CHECK_S if join_due is None else \
                    max(0.0, join_due - time.monotonic())
                timeout = wake if timeout is None else min(wake, timeout)
            if self._rejoining:
                timeout = JOIN_CHECK_S if timeout is None else min(JOIN_CHECK_S, timeout)
            try:
                proc, code = self.events.get(timeout=timeout)
            except queue.Empty:
                if followers and self._cut_off(followers):
                    for dc in {p.dc for p, _ in followers}:
                        workers_total -= self._leave(
                            next(p for p, _ in followers if p.dc == dc), EXIT_ABORTED, pending)
                    followers, blame_by = [], None
                    continue
                if joining:
                    continue
                if followers:                   # the cause is not among these processes
                    return self._failed(*_most_direct(followers))
                self._emit("launch", f"still running {SHUTDOWN_GRACE_S:g}s after the workers "
                                     f"finished: {', '.join(sorted(pending))}; stopping them")
                return 0
            if proc not in self.procs:      # a process replaced since (its DC rejoined)
                continue
            pending.discard(proc.name)
            if proc.dc in self.left:        # stopped because its DC left the run
                continue
            if code == EXIT_LEFT and proc.dc and self.min_dcs:     # the scheduler took its
                workers_total -= self._leave(proc, code, pending)   # DC out for now
                followers = [(p, c) for p, c in followers if p.dc != proc.dc]
                blame_by = blame_by if followers else None
                continue
            if code == 0 and proc.never_joined():
                return self._never_joined(proc)
            if code == 0:
                workers_ok += proc.role == "worker"
                # elastic: every member's worker finished; a DC still joining is late
                over = over or proc.role == "scheduler" and bool(self.min_dcs)
                continue
            if proc.restarts < self.restarts.get(proc.role, 0) and not proc.follows(code):
                pending.add(self._restart(proc, code).name)
                continue
            if not proc.follows(code) and self._may_leave(proc):
                workers_total -= self._leave(proc, code, pending)
                followers = [(p, c) for p, c in followers if p.dc != proc.dc]
                blame_by = blame_by if followers else None
                continue
            if proc.follows(code):
                followers.append((proc, code))
                blame_by = blame_by or time.monotonic() + BLAME_GRACE_S
                continue
            return self._failed(proc, code)
        return self._failed(*_most_direct(followers)) if followers else 0

    def join_later(self, after_s: float, start, dcs, when: str = "") -> None:
        """Elastic: call ``start()`` (it starts the processes of ``dcs``) ``after_s`` once
        every worker started so far joined the cluster and the file ``when`` (if given)
        exists (:meth:`wait` does)."""
        self._join = (after_s, start, tuple(dcs), when)

    def _join_due(self, pending: set, due: float | None) -> float | None:
        """When the join is due (None: not armed yet, or done): armed once every worker
        started so far joined; when due, the joining DCs are started and awaited like the
        others. O(processes)."""
        after_s, start, dcs, when = self._join
        now = time.monotonic()
        if due is None:
            if any(p.role == "worker" and p.never_joined() and p.popen.poll() is None
                   for p in self.procs) or when and not Path(when).exists():
                return None
            due = now + after_s
        if now < due:
            return due
        self._join = None
        before = {p.name for p in self.procs}
        self._emit("launch", f"starting {', '.join(dcs)}: joining the running cluster")
        start()
        pending.update(p.name for p in self.procs if p.name not in before)
        return None

    def _may_leave(self, proc: Proc) -> bool:
        """Elastic: ``proc``'s DC may leave the run (at least ``min_dcs`` others remain)."""
        members = {p.dc for p in self.procs if p.dc} - self.left
        return bool(self.min_dcs and proc.dc) and len(members) - 1 >= self.min_dcs

    def _leave(self, proc: Proc, code: int, pending: set) -> int:
        """``proc`` failed and its DC leaves the run: its other processes are stopped and
        awaited no more (docs/recovery-elastic.md). The number of its workers still
        counted as running. O(processes)."""
        self.left.add(proc.dc)
        mine = [p for p in self.procs if p.dc == proc.dc]
        remain = len({p.dc for p in self.procs if p.dc} - self.left)
        back = self.rejoins_left > len(self._rejoining)
        if back:
            self._rejoining.add(proc.dc)
        self._emit("launch", f"{proc.name} {_exit_words(code)}; {proc.dc} leaves the run "
                             f"({remain} DC(s) remain, min_dcs {self.min_dcs})"
                             + ("; it starts again to rejoin once its processes ended"
                                if back else ""))
        for other in mine:
            if other.popen.poll() is None:
                _signal_group(other.popen, signal.SIGTERM)
        running = [p for p in mine if p.role == "worker" and p.name in pending | {proc.name}]
        pending.difference_update(p.name for p in mine)
        return len(running)

    def _rejoin_due(self, pending: set) -> int:
        """Start again every DC waiting to rejoin whose processes have all ended (each
        one as it was started: the scheduler holds their places, and the DC joins anew,
        docs/recovery-elastic.md); the number of workers started. O(processes)."""
        started = 0
        for dc in sorted(self._rejoining):
            mine = [p for p in self.procs if p.dc == dc]
            if any(p.popen.poll() is None for p in mine):
                continue
            self._rejoining.discard(dc)
            self.left.discard(dc)
            self.rejoins_left -= 1
            self._emit("launch", f"starting {dc} again: it rejoins the running cluster "
                                 f"({self.rejoins_left} rejoin(s) left)")
            for old in sorted(mine, key=lambda p: p.role != "server"):   # server first
                new = self._start_again(old)
                pending.add(new.name)
                started += new.role == "worker"
        return started

    def _cut_off(self, followers) -> bool:
        """Elastic with rejoins: nodes that stopped because they took the scheduler for
        gone, while the scheduler runs on, were cut off from it (their DC was taken out
        of the run meanwhile, or will be): their DCs leave and rejoin rather than stop
        the cluster, if at least ``min_dcs`` others remain. O(processes)."""
        scheduler = [p for p in self.procs if p.role == "scheduler"]
        dcs = {p.dc for p, _ in followers}
        members = {p.dc for p in self.procs if p.dc} - self.left
        return bool(self.min_dcs and self.rejoins_left and all(dcs)) and \
            any(p.popen.poll() is None for p in scheduler) and \
            len(members - dcs) >= self.min_dcs

    def _restart(self, proc: Proc, code: int) -> Proc:
        """Start a failed worker again, into its rank, or a failed server, which takes a
        peer DC's replica: the scheduler waits for it (docs/recovery.md). Its reason file
        is cleared; the dead process is forgotten."""
        how = {"worker": "restarting it into its rank",
               "scheduler": "starting a new one; the nodes re-register with it"}.get(
            proc.role, "replacing it from a peer DC's replica")
        self._emit("launch", f"{proc.name} {_exit_words(code)}; {how} "
                             f"({proc.restarts + 1} of {self.restarts[proc.role]})")
        new = self._start_again(proc)
        new.restarts = proc.restarts + 1
        return new

    def _start_again(self, proc: Proc) -> Proc:
        """``proc``, ended, started anew as it was started (its restarts kept): its reason
        file is cleared and the ended process forgotten."""
        with contextlib.suppress(OSError):
            os.unlink(proc.reason_file)
        self.procs.remove(proc)
        argv, env, wrap = proc.start
        new = self.start(proc.name, proc.role, argv, env, wrap, reason_file=proc.reason_file,
                         joined_file=proc.joined_file, dc=proc.dc)
        new.restarts = proc.restarts
        return new

    def _never_joined(self, proc: Proc) -> int:
        """A worker finished "successfully" without ever joining: it trained alone. The
        worst a distributed launcher can do is call that a success. What it left in its
        reason file, if anything (a Python of the worker that could not import netstorm,
        an error a wrapper script went past), is the likelier cause than the store's name."""
        said = proc.reason()[0]
        if said:
            self._emit("launch", f"{proc.name} exited with code 0 without joining the "
                                 f"cluster: it never created the 'netstorm' kvstore; it said: "
                                 f"{said}{FAILURE_END}")
            return 1
        self._emit("launch", f"{proc.name} exited with code 0 without joining the cluster: it "
                             f"never created the 'netstorm' kvstore, so it trained alone (is "
                             f"the store's name spelled 'netstorm' in mx.kv.create, "
                             f"gluon.Trainer or Module.fit? a script written for MXNet's "
                             f"dist_sync needs --as-dist-sync); stopping the cluster")
        return 1

    def _failed(self, proc: Proc, code: int) -> int:
        what = _exit_words(code)
        reason = proc.reason()[0]
        if reason:
            what += f": {reason}"
        elif code == EXIT_ABORTED and proc.role != "worker":
            what += " (the cluster was aborted: the reason above names the node)"
        self._emit("launch", f"{proc.name} {what}{FAILURE_END}")
        self.note_stop(f"{proc.name} {what}")
        self.failure_followed = bool(proc.follows(code))
        self.failed_role = proc.role
        return code if code > 0 else 1

    def note_stop(self, reason: str) -> None:
        """Leave why the cluster stops where its servers look before they are signalled."""
        if self.stop_note:
            write_reason(self.stop_note, reason)


def _exit_words(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else \
        f"exited with code {code}"


def wait_for_exits(procs, seconds: float) -> None:
    """Until every one of ``procs`` exited, ``seconds`` at most in all."""
    deadline = time.monotonic() + seconds
    for p in procs:
        try:
            p.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _most_direct(followers: list) -> tuple:
    """Of failures that all followed another node's, the one whose reason names the cause
    most directly: a worker's (it says what it waited for), else the first."""
    return next((f for f in followers if f[0].role == "worker"), followers[0])


def interrupts_raise() -> StopSignals:
    """Within the block, SIGINT and SIGTERM raise :class:`Terminated`, a KeyboardInterrupt
    (so clean-up runs)."""
    return StopSignals(signal.SIGINT, signal.SIGTERM)


def _signal_group(popen, sig) -> None:
    try:
        os.killpg(popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
