"""A real single-host Slurm for the ``--slurm`` tests: its own munged, slurmctld and two
slurmd (nodes ``netstorm1`` at 127.0.0.1 and ``netstorm2`` at 127.0.0.2, two "hosts" of
one machine, as the ssh tests use), every file under one folder, every daemon stopped and
the folder removed by :meth:`SlurmCluster.close`.

The configuration is the least a real cluster runs with: munge authentication, the
backfill scheduler (the one that schedules heterogeneous jobs), cons_tres by CPU, process
tracking by parentage (proctrack/linuxproc), no task binding and no cgroups, no accounting.
Slurm and munge come from Debian's packages (``slurm-wlm``: slurmctld, slurmd,
slurm-client; ``munge``); :func:`unavailable` says why they cannot run here, for a skip.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PACKAGES = "Debian's slurm-wlm (slurmctld, slurmd, slurm-client) and munge"
OPT_IN = "NETSTORM_TEST_SYSTEM_PACKAGES=1"
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel")
NODES = {"netstorm1": "127.0.0.1", "netstorm2": "127.0.0.2"}
CPUS_PER_NODE = 4
READY_S = 30.0


def unavailable() -> str | None:
    """Why a Slurm cannot be started here (None: it can)."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None and
               not Path("/usr/sbin", p).exists()]
    if missing:
        return (f"needs a real Slurm: {', '.join(missing)} not installed; install {PACKAGES} "
                f"(scripts/test.sh does with {OPT_IN})")
    if os.geteuid() != 0:
        return "needs root: slurmd runs each job as its user"
    return None


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Finished:
    code: int
    output: str


class SlurmCluster:
    """munged, slurmctld and one slurmd per node of :data:`NODES`, configured in ``folder``;
    ready (every node idle) when the constructor returns. RuntimeError naming the daemon
    and its log otherwise (the daemons started are stopped)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.procs: list = []
        self.began = time.time()
        self.env = dict(os.environ, SLURM_CONF=str(folder / "slurm.conf"))
        for key in [k for k in self.env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
            del self.env[key]       # a test run inside a Slurm job: not that job's
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        folder = self.folder
        (folder / "state").mkdir(parents=True)
        for node in NODES:
            (folder / "spool" / node).mkdir(parents=True)
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self._daemon("munged", [_program("munged"), "--foreground", "--force",
                                f"--socket={folder / 'munge.sock'}", f"--key-file={key}",
                                f"--pid-file={folder / 'munged.pid'}",
                                f"--log-file={folder / 'munged.log'}",
                                f"--seed-file={folder / 'munged.seed'}"])
        self._wait(lambda: (folder / "munge.sock").exists(), "munged")
        (folder / "plugstack.conf").write_text("")
        (folder / "slurm.conf").write_text(self.config_text())
        conf = str(folder / "slurm.conf")
        self._daemon("slurmctld", [_program("slurmctld"), "-D", "-f", conf])
        for node in NODES:
            self._daemon(f"slurmd-{node}", [_program("slurmd"), "-D", "-N", node, "-f", conf])
        self._wait(self._all_idle, "the nodes (slurmd) to be idle")

    def config_text(self) -> str:
        """slurm.conf for this host: the controller here, :data:`NODES` on it."""
        f = self.folder
        host = socket.gethostname().split(".")[0]
        lines = [
            "ClusterName=netstormtest", f"SlurmctldHost={host}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={f / 'munge.sock'}", f"SlurmctldPort={_free_port()}",
            f"StateSaveLocation={f / 'state'}", f"SlurmdSpoolDir={f / 'spool'}/%n",
            f"SlurmctldPidFile={f / 'slurmctld.pid'}", f"SlurmdPidFile={f / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={f / 'slurmctld.log'}", f"SlurmdLogFile={f / 'slurmd-%n.log'}",
            f"PlugStackConfig={f / 'plugstack.conf'}", "MailProg=/bin/true",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "MpiDefault=none",
            "SchedulerType=sched/backfill", "SchedulerParameters=bf_interval=1",
            # sbatch --wait polls every 2 s while 2 s < MinJobAge / 2, else every 8 or 32 s
            "MinJobAge=4", "KillWait=2", "ReturnToService=2",
            "SlurmdParameters=config_overrides",     # more CPUs per node than this host has
        ]
        lines += [f"NodeName={node} NodeHostname={host} NodeAddr={address} "
                  f"Port={_free_port()} CPUs={CPUS_PER_NODE} RealMemory=1000 State=UNKNOWN"
                  for node, address in NODES.items()]
        lines.append(f"PartitionName=test Nodes={','.join(NODES)} Default=YES "
                     f"MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def _daemon(self, name: str, argv: list) -> None:
        log = open(self.folder / f"{name}.out", "wb")
        self.procs.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, env=self.env,
                                                  start_new_session=True)))
        log.close()

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {proc.returncode}: "
                                       f"{self.log(name)[-1500:]}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"waited {READY_S:g}s for {what}: "
                           f"{self.log('slurmctld')[-1500:]}")

    def _all_idle(self) -> bool:
        done = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N %T"],
                              env=self.env, capture_output=True, text=True)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return done.returncode == 0 and all(states.get(n) == "idle" for n in NODES)

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def sbatch_wait(self, script: Path, env: dict, cwd: Path, timeout: float) -> Finished:
        """``sbatch --wait SCRIPT`` with ``env`` (forwarded to the job), from ``cwd``:
        sbatch's exit code and the job's output. On ``timeout`` the job is cancelled."""
        out = self.folder / f"job-{time.monotonic_ns()}.out"
        argv = ["sbatch", "--wait", f"--output={out}", str(script)]
        proc = subprocess.Popen(argv, env={**self.env, **env}, cwd=cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            said, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            said, _ = proc.communicate()
            self.cancel_all()
            code = -1
        else:
            code = proc.returncode
        text = out.read_text(errors="replace") if out.exists() else ""
        return Finished(code, said.decode(errors="replace") + text)

    def jobs(self) -> list:
        """The ids of the jobs slurmctld still knows as pending or running."""
        done = subprocess.run(["squeue", "--noheader", "--format=%i"], env=self.env,
                              capture_output=True, text=True)
        return done.stdout.split()

    def cancel_all(self) -> None:
        """Cancel every job and wait (10 s at most) until none is left."""
        deadline = time.monotonic() + 10
        while self.jobs() and time.monotonic() < deadline:
            subprocess.run(["scancel", "--full", *self.jobs()], env=self.env,
                           capture_output=True)
            time.sleep(0.5)

    def step_daemons(self) -> list:
        """The slurmstepd processes started since this Slurm started (a job's steps; they
        end shortly after their job)."""
        import psutil   # noqa: PLC0415
        found = []
        for proc in psutil.process_iter(["name", "create_time"]):
            if proc.info["name"] == "slurmstepd" and proc.info["create_time"] >= self.began:
                found.append(proc)
        return found

    def close(self) -> None:
        """Cancel what still runs, wait (10 s at most) for the step daemons to end, stop
        every daemon (SIGTERM, then SIGKILL after 5 s), remove the folder."""
        if any(name == "slurmctld" and p.poll() is None for name, p in self.procs):
            self.cancel_all()
        deadline = time.monotonic() + 10
        while self.step_daemons() and time.monotonic() < deadline:
            time.sleep(0.2)
        for proc in self.step_daemons():
            with contextlib.suppress(Exception):     # it ended meanwhile
                proc.kill()
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
