"""A run's state file, ``<state_dir>/<run>.json``: written (atomically) before anything of
the run is created, so ``down --run`` works from another invocation and after a killed run;
read back by :meth:`~netstorm.wan.emulator.EmulatedWan.attach`. The files of all live runs
also say which address ranges (``10.<octet>.0.0/16``) are taken: :func:`free_octet` picks
one no other run holds, under the folder's lock (:func:`state_lock`), starting from a hash
of the run id. O(runs) per pick.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import zlib
from pathlib import Path

from .netns import WanError

__all__ = ["OCTETS", "free_octet", "read_state", "state_lock", "used_octets", "write_state"]

OCTETS = range(64, 192)


@contextlib.contextmanager
def state_lock(state_dir: Path):
    """Within the block, no other run of this machine reserves an id or an address range."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_state(path: Path, state: dict) -> None:
    """Replace the state file ``path`` with ``state`` (a reader never sees half of it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(path)


def read_state(path: Path, run_id: str) -> dict:
    """The state file ``path`` of run ``run_id``; :class:`WanError` naming it if unreadable."""
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise WanError(f"no state file {path} for run {run_id!r}: {exc.strerror}") from exc
    except ValueError as exc:
        raise WanError(f"{path}: not valid JSON: {exc}") from exc


def used_octets(state_dir: Path, own: Path) -> set:
    """The octets the state files in ``state_dir`` other than ``own`` hold."""
    used = set()
    for path in state_dir.glob("*.json"):
        if path != own:
            with contextlib.suppress(OSError, ValueError, KeyError):
                used.add(json.loads(path.read_text())["octet"])
    return used


def free_octet(run_id: str, state_dir: Path, own: Path) -> int:
    """An octet of :data:`OCTETS` no other run's state file holds (call under
    :func:`state_lock`); :class:`WanError` when every one is held."""
    used = used_octets(state_dir, own)
    start = zlib.crc32(run_id.encode()) % len(OCTETS)
    for step in range(len(OCTETS)):
        octet = OCTETS[(start + step) % len(OCTETS)]
        if octet not in used:
            return octet
    raise WanError(f"all {len(OCTETS)} address ranges are held by runs in "
                   f"{state_dir}; bring some down (down --all)")
