"""The far end of ``launch.py --ssh``: ``python -m netstorm.launcher.remote``, started by
ssh on every host of a cluster, starts the processes the cluster file places on that host.

Its standard input is the launching host's pipe: the first line is a JSON *bundle* (the
cluster file, the secret keys this host needs, the worker command, the forwarded
environment, the working folder; :func:`parse_bundle` checks every field); after it, a line
``{"stop": REASON}`` or the end of the input (the launching host stopped, died or lost the
connection) stops every process here, REASON passed on to the servers (so the other hosts
learn which node failed). The bundle's files live in a private temporary folder removed at
the end. Exit codes: the local launcher's, :data:`EXIT_ABORTED` when the failure here only
followed another node's, 2 for an unusable bundle.
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import threading
from pathlib import Path

from netstorm.geoserver.config.exit_reasons import EXIT_ABORTED
from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster

from . import placement
from .supervisor import interrupts_raise, run_cluster

__all__ = ["BUNDLE_VERSION", "BundleError", "ENV_NAME", "FIELDS", "KEY_FILE", "MAX_BUNDLE_BYTES",
           "RawLines", "StopWatch", "main", "parse_bundle", "write_files"]

BUNDLE_VERSION = 1
MAX_BUNDLE_BYTES = 16 << 20
KEY_FILE = re.compile(r"(scheduler|dc-[A-Za-z0-9_-]+)\.key_secret")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FIELDS = {"version": int, "host": str, "cluster": str, "keys": dict, "command": list,
          "env": dict, "workdir": str, "as_dist_sync": bool}


class BundleError(ValueError):
    """The bundle from the launching host is unusable; the text says which field."""


def parse_bundle(line: bytes) -> dict:
    """The bundle in ``line``, once every field has its type and every name is safe (key
    file names without folders, environment names that are names). O(size)."""
    try:
        bundle = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"the launching host sent no bundle ({exc}); is the launcher on "
                          f"both hosts the same version?") from None
    if not isinstance(bundle, dict):
        raise BundleError("the bundle is not a JSON object")
    for key, kind in FIELDS.items():
        if not isinstance(bundle.get(key), kind) or kind is int and \
                isinstance(bundle.get(key), bool):
            raise BundleError(f"bundle field {key!r} must be {kind.__name__}")
    if bundle["version"] != BUNDLE_VERSION:
        raise BundleError(f"bundle version {bundle['version']}, this host understands "
                          f"{BUNDLE_VERSION}: install the same netstorm on every host")
    if not bundle["command"] or not all(isinstance(a, str) for a in bundle["command"]):
        raise BundleError("bundle field 'command' must be a non-empty list of strings")
    for name, text in bundle["keys"].items():
        if not KEY_FILE.fullmatch(name) or not isinstance(text, str):
            raise BundleError(f"bundle key file {name!r} is not a secret key file name")
    for name, value in bundle["env"].items():
        if not ENV_NAME.fullmatch(name) or not isinstance(value, str):
            raise BundleError(f"bundle variable {name!r} is not an environment variable")
    return bundle


def write_files(bundle: dict, folder: Path) -> Path:
    """The bundle's cluster file and keys in ``folder`` (keys readable by this user only);
    the cluster file's path."""
    keys = folder / "keys"
    keys.mkdir(mode=0o700)
    for name, text in bundle["keys"].items():
        fd = os.open(keys / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
    path = folder / "cluster.toml"
    path.write_text(bundle["cluster"])
    return path


class RawLines:
    """Lines from a file descriptor, read without Python's buffered-file lock (a daemon
    thread blocked in a buffered read makes the interpreter abort at exit)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.pending = b""

    def readline(self, limit: int) -> bytes:
        """The next line with its newline, at most ``limit`` bytes; b"" at the end."""
        while b"\n" not in self.pending and len(self.pending) < limit:
            data = os.read(self.fd, 1 << 16)
            if not data:
                break
            self.pending += data
        end = self.pending.find(b"\n") + 1 or min(len(self.pending), limit)
        line, self.pending = self.pending[:end], self.pending[end:]
        return line


class StopWatch:
    """Reads the rest of the launching host's pipe; a stop line or its end stops the
    processes here (SIGTERM to this process: :func:`interrupts_raise` turns it into the
    launcher's clean-up), passing the launching host's reason on to the servers."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.launcher = None
        self.reason = ""
        threading.Thread(target=self._watch, daemon=True, name="stop-watch").start()

    def started(self, launcher) -> None:
        self.launcher = launcher
        if self.reason:
            launcher.note_stop(self.reason)

    def _watch(self) -> None:
        for line in iter(lambda: self.pipe.readline(MAX_BUNDLE_BYTES), b""):
            try:
                message = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            if isinstance(message, dict) and isinstance(message.get("stop"), str):
                self.reason = message["stop"][:1000]
                if self.launcher is not None:
                    self.launcher.note_stop(self.reason)
                break
        if self.launcher is not None:
            self.launcher._emit("launch", "the launching host stops this one: " +
                                (self.reason or "its connection closed"))
        os.kill(os.getpid(), signal.SIGTERM)


def main() -> int:
    pipe = RawLines(sys.stdin.fileno())
    try:
        bundle = parse_bundle(pipe.readline(MAX_BUNDLE_BYTES))
    except BundleError as exc:
        print(f"launch: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        with interrupts_raise(), tempfile.TemporaryDirectory(prefix="netstorm-host-") as tmp:
            config = load_cluster(write_files(bundle, Path(tmp)))
            part = placement.on_host(config, bundle["host"])
            os.environ.update(bundle["env"])
            os.chdir(bundle["workdir"])
            watch = StopWatch(pipe)
            return run_cluster(config, bundle["command"], part=part,
                               as_dist_sync=bundle["as_dist_sync"], started=watch.started,
                               follower_code=EXIT_ABORTED)
    except (ClusterFileError, OSError) as exc:
        print(f"launch: on {bundle['host']}: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
