"""Where a launcher's lines go and how verbose its processes are: :class:`RunLog`.

Every line the launcher prints (a child's, prefixed with its name, or its own, ``[launch]``)
goes to the console and, with ``--log-dir DIR``, also to one file per process in ``DIR``
(:func:`file_name`: ``scheduler.log``, ``server-eu.log``, ``worker-eu-0.log``, the
launcher's own lines in ``launcher.log``; a host's under ``--ssh``, ``host-ADDRESS.log``),
the same lines as the console's. A run truncates the files of the processes it starts; a
restarted process appends to its file. A file that cannot be written is said once on the
console, whose lines go on. ``level`` (``--log-level``, ``--quiet``) is the one every
process of the run logs at: :meth:`RunLog.process_args` for the scheduler and the servers,
:meth:`RunLog.worker_env` for the workers (their boot sets up logging from it), and it
drops the launcher's own info lines below it. Each line is O(its length).
"""
from __future__ import annotations

import logging
import re
import sys
import threading
from pathlib import Path

from netstorm.geoserver.cli import LOG_LEVELS

__all__ = ["LAUNCHER_FILE", "LEVEL_VARIABLE", "LogDirError", "RunLog", "file_name"]

LAUNCHER_FILE = "launcher.log"          # the launcher's own lines (prefix ``launch``)
LEVEL_VARIABLE = "NETSTORM_LOG_LEVEL"   # a worker's log level (boot/sitecustomize.py)
_SEPARATORS = re.compile(r"[ /]")       # "worker eu/0" -> "worker-eu-0"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class LogDirError(ValueError):
    """``--log-dir`` names a folder that cannot be made or written; the text says why."""


def file_name(process: str) -> str:
    """The log file of the process the launcher names ``process`` (its lines' prefix):
    spaces and slashes become ``-``, other characters a file name should not hold ``_``;
    the launcher's own lines (``launch``) go to :data:`LAUNCHER_FILE`."""
    if process == "launch":
        return LAUNCHER_FILE
    return _UNSAFE.sub("_", _SEPARATORS.sub("-", process)) + ".log"


class RunLog:
    """The console ``stream`` (default standard output) and, with a ``folder``, a file per
    process; ``level`` is a name of :data:`~netstorm.geoserver.cli.LOG_LEVELS`. Thread-safe
    (every process's reader thread writes here). A context manager closing the files; a
    stream too (:meth:`write`), so that what is printed to it is the launcher's own."""

    def __init__(self, stream=None, folder=None, level: str = "info"):
        if level not in LOG_LEVELS:
            raise ValueError(f"log level {level!r} is not one of {', '.join(LOG_LEVELS)}")
        self.stream = stream or sys.stdout
        self.level = level
        self.folder = Path(folder) if folder else None
        self._files: dict = {}      # file name -> open file, or None once it failed
        self._lock = threading.Lock()
        if self.folder is not None:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                raise LogDirError(f"--log-dir {folder}: exists and is not a folder") from None
            except OSError as exc:
                raise LogDirError(f"--log-dir {folder}: cannot make the folder: "
                                  f"{exc.strerror or exc}") from None
            try:
                self._files[LAUNCHER_FILE] = self._open(LAUNCHER_FILE)
            except OSError as exc:
                raise LogDirError(f"--log-dir {folder}: cannot write {LAUNCHER_FILE} in it: "
                                  f"{exc.strerror or exc}") from None

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, *_exc) -> bool:
        self.close()
        return False

    def process_args(self) -> list:
        """The flags that set the scheduler's and a server's log level."""
        return ["--log-level", self.level]

    def worker_env(self) -> dict:
        """The variable that sets a worker's log level (read by the workers' boot)."""
        return {LEVEL_VARIABLE: self.level}

    def shows_info(self) -> bool:
        return LOG_LEVELS[self.level] <= logging.INFO

    def started(self, process: str) -> None:
        """``process`` starts: its file exists from now on, also if it never prints."""
        with self._lock:
            self._file(process)

    def emit(self, prefix: str, line: str) -> None:
        """``[prefix] line`` on the console and in ``prefix``'s file."""
        text = f"[{prefix}] {line}" + ("" if line.endswith("\n") else "\n")
        with self._lock:
            self.stream.write(text)
            self.stream.flush()
            self._to_file(prefix, text)

    def write(self, text: str) -> None:
        """A stream's ``write``, for who prints to the launcher's output directly (the
        lines are the launcher's own: the console and ``launcher.log``)."""
        with self._lock:
            self.stream.write(text)
            self._to_file("launch", text)

    def flush(self) -> None:
        with self._lock:
            self.stream.flush()

    def info(self, prefix: str, line: str) -> None:
        """As :meth:`emit`, unless the level is above ``info`` (``--quiet``)."""
        if self.shows_info():
            self.emit(prefix, line)

    def close(self) -> None:
        with self._lock:
            for file in self._files.values():
                if file is not None:
                    try:
                        file.close()
                    except OSError:
                        pass
            self._files = {name: None for name in self._files}

    def _file(self, prefix: str):
        """The open file of ``prefix`` (opened, truncated, on first use), or None: no
        folder, or the file failed. Under the lock."""
        if self.folder is None:
            return None
        name = file_name(prefix)
        if name not in self._files:
            try:
                self._files[name] = self._open(name)
            except OSError as exc:
                self._files[name] = None
                self._say_broken(name, exc)
        return self._files[name]

    def _open(self, name: str):
        """The file ``name`` of the folder, truncated, written a line at a time (``tail
        -f`` follows it)."""
        return open(self.folder / name, "w", encoding="utf-8", buffering=1)

    def _to_file(self, prefix: str, text: str) -> None:
        """``text`` to ``prefix``'s file, if it has one. Under the lock."""
        file = self._file(prefix)
        if file is not None:
            try:
                file.write(text)
            except OSError as exc:
                self._broken(prefix, exc)

    def _broken(self, prefix: str, exc: OSError) -> None:
        """``prefix``'s file failed: closed, said once, written no more. Under the lock."""
        name = file_name(prefix)
        file, self._files[name] = self._files[name], None
        try:
            file.close()
        except OSError:
            pass
        self._say_broken(name, exc)

    def _say_broken(self, name: str, exc: OSError) -> None:
        self.stream.write(f"[launch] cannot write {self.folder / name}: "
                          f"{exc.strerror or exc}; its lines go to the console only\n")
        self.stream.flush()
