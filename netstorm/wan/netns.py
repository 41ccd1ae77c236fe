"""Shell commands and network namespaces for the emulated WAN: run ``ip``/``tc``, list,
stop and remove namespaces. Needs root; :class:`WanUnavailable` says why when it is missing.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

__all__ = ["CMD_TIMEOUT_S", "PREFIX", "RUN_RE", "STATE_DIR", "STOP_GRACE_S", "VETH_RE", "WanError",
           "WanUnavailable", "check_available", "down_all", "list_netns", "remove_namespaces",
           "root_links"]

PREFIX = "netstorm"
STATE_DIR = Path("/run/netstorm-wan")
RUN_RE = re.compile(r"^[a-z0-9]{1,6}$")
VETH_RE = re.compile(r"^nw([a-z0-9]{1,6})-\d+[ab]$")
CMD_TIMEOUT_S = 30.0
STOP_GRACE_S = 2.0


class WanError(RuntimeError):
    """Setting up, changing or removing the emulated WAN failed; the message says which step."""


class WanUnavailable(WanError):
    """This machine (or user) cannot build an emulated WAN; the message says why."""


def _run(argv, input: str = None, check: bool = True,
         timeout: float = CMD_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, input=input, capture_output=True, text=True,
                              timeout=timeout)
    except FileNotFoundError as exc:
        raise WanUnavailable(f"{argv[0]} is not installed: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise WanError(f"{' '.join(argv)} did not finish within {timeout}s") from exc
    if check and done.returncode != 0:
        what = " ".join(argv) + (f" (batch:\n{input.rstrip()})" if input else "")
        raise WanError(f"{what} failed with exit code {done.returncode}: "
                       f"{(done.stderr or done.stdout).strip()}")
    return done


def check_available() -> None:
    """Raise :class:`WanUnavailable` unless we are root and ``ip netns``/``tc`` work."""
    if os.geteuid() != 0:
        raise WanUnavailable(f"the emulated WAN needs root (network namespaces, tc); "
                             f"running as uid {os.geteuid()}")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise WanUnavailable(f"{tool!r} (iproute2) is not on PATH")
    probe = f"nsprobe-{os.getpid()}-{threading.get_ident() % 10000}"
    done = _run(["ip", "netns", "add", probe], check=False)
    if done.returncode != 0:
        raise WanUnavailable(f"cannot create a network namespace (ip netns add {probe}): "
                             f"{done.stderr.strip()}")
    _run(["ip", "netns", "del", probe], check=False)


def list_netns() -> list:
    """Names of every named network namespace on this machine."""
    out = _run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def root_links() -> list:
    """Names of every network device in the root namespace."""
    out = _run(["ip", "-o", "link", "show"]).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def _stop_processes(namespaces) -> None:
    pids = []
    for ns in namespaces:
        done = _run(["ip", "netns", "pids", ns], check=False)
        pids += [int(p) for p in done.stdout.split() if p.isdigit() and int(p) != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                alive.append(pid)
        deadline = time.monotonic() + STOP_GRACE_S
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in alive if os.path.exists(f"/proc/{pid}")
                     and not _is_zombie(pid)]
            time.sleep(0.05)
        pids = alive
        if not pids:
            return


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def remove_namespaces(namespaces) -> None:
    """Stop the processes inside ``namespaces`` and delete them (missing ones are fine)."""
    namespaces = list(namespaces)
    if not namespaces:
        return
    _stop_processes(namespaces)
    for ns in namespaces:
        done = _run(["ip", "netns", "del", ns], check=False)
        if done.returncode != 0 and ns in list_netns():
            raise WanError(f"ip netns del {ns} failed: {done.stderr.strip()}")


def down_all(prefix: str = PREFIX, state_dir=STATE_DIR) -> list:
    """Remove every namespace named ``<prefix>-*`` and every state file of such runs.

    Returns the run ids found. Other users' namespaces of the same prefix go too: use only
    on a machine where the emulated WANs are yours.
    """
    state_dir = Path(state_dir)
    runs = set()
    for path in state_dir.glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            if json.loads(path.read_text())["prefix"] == prefix:
                runs.add(path.stem)
    namespaces = [ns for ns in list_netns() if ns.startswith(f"{prefix}-")]
    runs |= {ns[len(prefix) + 1:].split("-", 1)[0] for ns in namespaces}
    remove_namespaces(namespaces)
    for name in root_links():
        match = VETH_RE.match(name)
        if match and match.group(1) in runs:
            _run(["ip", "link", "del", name], check=False)
    for run in runs:
        with contextlib.suppress(FileNotFoundError):
            (state_dir / f"{run}.json").unlink()
    left = [ns for ns in list_netns() if ns.startswith(f"{prefix}-")]
    if left:
        raise WanError(f"could not remove namespaces {left}")
    return sorted(runs)

