"""Cheap reads of an emulated WAN's per-link-direction byte counters, for sampling them
every few tens of milliseconds during a run.

:meth:`EmulatedWan.link_bytes` runs one ``ip -s link show`` per namespace (9 processes on
paper9): fine before and after a run, too dear every 50 ms. :class:`LinkCounters` instead
opens each namespace's ``/proc/net/dev`` once (a helper thread enters the namespace with
``setns(2)``, opens the file, and leaves; the open file stays bound to that namespace) and
re-reads the open files: one ``read`` per DC, no process. Where ``setns`` is unavailable it
falls back to :meth:`EmulatedWan.link_bytes` (``fast`` says which).

Each direction's figure is the sending veth's transmit counter, i.e. what left the shaper:
frames with their Ethernet, IP and TCP headers, the same bytes the shaper's rate counts.
"""
from __future__ import annotations

import ctypes
import os
import threading

__all__ = ["CLONE_NEWNET", "LinkCounters", "parse_net_dev"]

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"


def parse_net_dev(text: str) -> dict:
    """``{device: transmitted bytes}`` from the text of ``/proc/net/dev`` (two header lines,
    then ``name: 8 receive fields, 8 transmit fields``; transmit bytes is the 9th number).
    Lines that do not parse are skipped. O(lines)."""
    out = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 9:
            continue
        try:
            out[name.strip()] = int(fields[8])
        except ValueError:
            continue
    return out


def _open_in_netns(netns: str, path: str = "/proc/thread-self/net/dev"):
    """``path`` opened from inside network namespace ``netns`` (by a short-lived thread that
    enters it and comes back), unbuffered; raises OSError when that is not possible."""
    libc = ctypes.CDLL(None, use_errno=True)       # the C library this process loaded
    box: dict = {}

    def run():
        own = target = None
        try:
            own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            target = os.open(os.path.join(NETNS_DIR, netns), os.O_RDONLY)
            if libc.setns(target, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns into {netns}: {os.strerror(err)}")
            try:
                box["file"] = open(path, "rb", buffering=0)
            finally:
                if libc.setns(own, CLONE_NEWNET) != 0:    # the thread ends anyway
                    box["stuck"] = True
        except OSError as exc:
            box["error"] = exc
        finally:
            for fd in (own, target):
                if fd is not None:
                    os.close(fd)

    thread = threading.Thread(target=run, name=f"netns-open-{netns}", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["file"]


class LinkCounters:
    """Bytes sent so far per link direction of ``wan`` (an up :class:`EmulatedWan`), read
    cheaply: :meth:`read` returns ``{(a, b): bytes}`` like ``wan.link_bytes()``. A context
    manager (closes the files). O(DCs) files, one read each per :meth:`read`."""

    def __init__(self, wan):
        self.wan = wan
        self._devices = wan.link_devices()      # (a, b) -> (netns, device)
        self._files: dict = {}
        self.fast = True
        try:
            for netns in sorted({ns for ns, _ in self._devices.values()}):
                self._files[netns] = _open_in_netns(netns)
        except (OSError, AttributeError):
            self.close()
            self.fast = False

    def read(self) -> dict:
        """``{(a, b): bytes sent so far}`` (None for a direction whose device is missing)."""
        if not self.fast:
            return self.wan.link_bytes()
        counters = {}
        for netns, f in self._files.items():
            f.seek(0)
            counters[netns] = parse_net_dev(f.read().decode("ascii", "replace"))
        return {pair: counters.get(ns, {}).get(dev) for pair, (ns, dev) in
                self._devices.items()}

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}

    def __enter__(self) -> "LinkCounters":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
