"""``launch.py --cluster FILE --ssh``: start every host's share of a cluster from one command.

For each host the cluster file places a process on (:mod:`.placement`), the launcher runs
``ssh HOST PYTHON -m netstorm.launcher.remote`` (:mod:`.remote`) and writes it one JSON
line: the cluster file, the secret keys of the principals that host runs (nothing more
leaves this machine; a file without keys gets throw-away ones, made here for this run),
the worker command, the forwarded environment and the working folder. Every remote output
line comes back prefixed with its host; the first host to fail names its failed process and
stops the cluster: every other host is sent the reason and its input is closed, which stops
its processes (and so does a lost connection, or Ctrl-C here). ssh itself runs in batch mode
with a connect timeout: an unreachable host fails the launch at once, naming it.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from netstorm.geoserver.config.cluster import ClusterConfig, ClusterFileError
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.keys import SCHEDULER_PRINCIPAL, key_file_name

from . import placement
from .remote import BUNDLE_VERSION
from .processes import STOP_GRACE_S, Launcher, wait_for_exits
from .supervisor import child_env, with_keys

__all__ = ["FORWARDED_PREFIXES", "REMOTE_STOP_S", "SshLauncher", "bundle", "forwarded_env",
           "principals_on", "run_far_ends", "run_over_ssh"]

FORWARDED_PREFIXES = ("MXNET_", "OMP_")     # always passed on to the remote processes
REMOTE_STOP_S = STOP_GRACE_S + 5.0      # a remote launcher's clean-up, before ssh is killed


def forwarded_env(config: ClusterConfig, environ) -> dict:
    """What the remote processes get of this environment: ``MXNET_*``, ``OMP_*``, the
    names ``[ssh] env`` lists, and ``PATH`` when no ``[ssh] python`` is given (the hosts
    mirror this one, so ``python`` in the worker command is the same virtualenv's)."""
    names = set(config.ssh.env) | ({"PATH"} if not config.ssh.python else set())
    return {k: v for k, v in environ.items()
            if k.startswith(FORWARDED_PREFIXES) or k in names}


def principals_on(config: ClusterConfig, part: placement.Part) -> list:
    """The principals whose secret keys the processes of ``part`` need."""
    dcs = dict.fromkeys([*part.servers, *(dc for dc, _ in part.workers)])
    return ([SCHEDULER_PRINCIPAL] if part.scheduler else []) + list(dcs)


def bundle(config: ClusterConfig, host: str, command: list, env: dict, workdir: str,
           as_dist_sync: bool) -> dict:
    """What ``host`` is sent: see the module's docstring and :func:`.remote.parse_bundle`.
    :class:`ClusterFileError` if a secret key it needs cannot be read."""
    keys = {}
    security = config.security
    if security.curve:
        for principal in principals_on(config, placement.on_host(config, host)):
            path = Path(security.secret_keys) / key_file_name(principal)
            try:
                keys[path.name] = path.read_text()
            except OSError as exc:
                raise ClusterFileError(f"cannot read the secret key {path} that {host} needs: "
                                       f"{exc.strerror}") from None
        security = replace(security, secret_keys="keys")
    shipped = replace(config, security=security)
    return {"version": BUNDLE_VERSION, "host": host, "cluster": to_toml(shipped),
            "keys": keys, "command": list(command), "env": env, "workdir": workdir,
            "as_dist_sync": as_dist_sync}


class SshLauncher(Launcher):
    """A :class:`Launcher` of ssh clients, one per host: stopping first tells each remote
    launcher why and closes its input (it then stops its processes), then waits for them."""

    reason = ""     # why the cluster stops, for the remote launchers

    def stop_all(self) -> None:
        live = [p for p in self.procs if p.popen.poll() is None]
        for proc in live:
            try:
                if self.reason:
                    proc.popen.stdin.write(json.dumps({"stop": self.reason}).encode() + b"\n")
                proc.popen.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
        wait_for_exits(live, REMOTE_STOP_S)
        super().stop_all()

    def note_stop(self, reason: str) -> None:
        self.reason = reason


def run_over_ssh(config: ClusterConfig, command: list, as_dist_sync: bool = False, out=None,
                 environ=None) -> int:
    """Run the whole cluster ``config`` on its hosts over ssh, ``command`` on its workers.
    Returns the exit code; nothing is left running on any host that answered."""
    environ = os.environ if environ is None else environ
    python = config.ssh.python or sys.executable
    workdir = config.ssh.workdir or os.getcwd()
    remote = shlex.join([python, "-P", "-m", "netstorm.launcher.remote"])
    hosts = placement.hosts(config)
    with tempfile.TemporaryDirectory(prefix="netstorm-ssh-") as tmp:
        config = with_keys(config, tmp, whole_cluster=True)
        env = forwarded_env(config, environ)
        far_ends = [(host, f"{host}: {placement.on_host(config, host).describe()} "
                           f"(ssh {config.ssh.destination(host)})",
                     config.ssh.argv(host) + [remote],
                     bundle(config, host, command, env, workdir, as_dist_sync))
                    for host in hosts]
        return run_far_ends(out, far_ends, f"{len(hosts)} host(s), {len(config.dcs)} DC(s), "
                                           f"{config.num_workers} worker(s)")


def run_far_ends(out, far_ends: list, what: str) -> int:
    """Start every host's far end (:mod:`.remote`), ``far_ends`` being ``[(host label,
    its launch line, the command that starts it, its bundle)]``, each fed its bundle as
    one JSON line; wait for them all (the first to fail stops the others) and say
    ok/FAILED with ``what`` ran and how long. The exit code. O(far ends)."""
    launcher = SshLauncher(out)
    with launcher:
        for label, line, argv, data in far_ends:
            launcher._emit("launch", line)
            launcher.start(f"host {label}", "host", argv, child_env({}),
                           stdin_data=json.dumps(data).encode() + b"\n")
        began = time.monotonic()
        code = launcher.wait(0)
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        launcher._emit("launch", f"{status}: {what}, {time.monotonic() - began:.1f}s")
        return code
