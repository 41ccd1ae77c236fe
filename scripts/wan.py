#!/usr/bin/env python3
"""An emulated WAN on this machine: one network namespace per DC, shaped veth links.

    python scripts/wan.py up small --scale 0.25          # prints the run id and DC addresses
    python scripts/wan.py status --run RUN                # JSON: rates, byte counters
    python scripts/wan.py set-rate --run RUN dc0 dc1 5    # dc0 -> dc1 now 5 Mbit/s
    python scripts/wan.py down --run RUN                  # or: down --all
    python scripts/wan.py run paper9 --trace paper9-fluctuating -- python bench.py

Every DC of a :class:`scheduler.topology.Topology` becomes the namespace
``netstorm-<run>-<dc>``; every topology link k becomes one veth pair ``nw<run>-<k>a`` (in
``a``'s namespace) / ``nw<run>-<k>b`` (in ``b``'s), created directly inside the namespaces
(never in the root namespace). Each end's egress is shaped by tc htb (class 1:1 at the
link's rate in that direction, burst max(16 KiB, 5 ms of traffic)) with a bfifo of 100 ms of
traffic (at least 64 KiB) under it. The veths do no segmentation offload (gso_max_segs 1):
64 KiB GSO packets would make the shaper bursty and one drop cost 44 segments, which
collapses TCP at a few Mbit/s. htb counts whole frames, so TCP goodput is about 96% of the
configured rate (1448 payload bytes per 1514-byte frame). IPv6 is off in the namespaces.
There is no delay emulation (netem is unavailable).

Address scheme (each run owns one private /16, ``10.<octet>.0.0/16``):

* DC i (its position in ``topology.dcs``) has the DC address ``10.<octet>.<i>.1/32`` on its
  namespace's ``lo``; processes of that DC bind it, and connections between DCs carry it as
  source (every route sets ``src``).
* Link k uses the /30 ``10.<octet>.<128 + k // 64>.<4 * (k % 64)>``: ``.1`` on the ``a`` end,
  ``.2`` on the ``b`` end.
* Every namespace routes each other DC's address along
  :func:`scheduler.topology.shortest_paths` (hop count, deterministic ties, symmetric), with
  ip_forward=1 and rp_filter=0, so traffic between far DCs shares intermediate links.
* ``<octet>`` is picked in 64..191 (starting from a hash of the run id) among those no live
  run's state file holds, under a lock, so two runs never share addresses. (Namespaces are
  isolated from each other anyway; the distinct ranges keep addresses unambiguous in logs.)

The root namespace has no link into the WAN: run processes with :meth:`EmulatedWan.exec_prefix`
(``ip netns exec <ns>``). Each run keeps a state file ``/run/netstorm-wan/<run>.json``
(written before anything is created) so ``down --run`` works from another invocation and
after a killed run; ``down --all`` removes every ``netstorm-*`` namespace. ``down`` stops
any process still inside the run's namespaces (SIGTERM, then SIGKILL) so their veths vanish.
Needs root; without it (or without ``ip netns``) :class:`WanUnavailable` says why.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scheduler.topology import (Link, Topology, TopologyError, load_topology,  # noqa: E402
                                load_trace, next_hops)

PREFIX = "netstorm"
STATE_DIR = Path("/run/netstorm-wan")
OCTETS = range(64, 192)
MAX_DCS = 128                    # third octet 0..127 for DC addresses
MAX_LINKS = 64 * 127             # third octets 128..254 for link /30s, 64 per octet
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


def _kbit(mbps: float) -> int:
    return max(1, round(mbps * 1000))


def htb_args(mbps: float) -> list:
    """tc htb class arguments for ``mbps``: burst = max(16 KiB, 5 ms of traffic)."""
    burst = max(16 * 1024, round(mbps * 1e6 / 8 * 0.005))
    return ["rate", f"{_kbit(mbps)}kbit", "ceil", f"{_kbit(mbps)}kbit",
            "burst", f"{burst}b", "cburst", f"{burst}b"]


def fifo_limit(mbps: float) -> int:
    """Bytes of queue under the shaper: 100 ms of traffic, at least 64 KiB."""
    return max(64 * 1024, round(mbps * 1e6 / 8 * 0.1))


def new_run_id() -> str:
    return secrets.token_hex(3)[:5]


@dataclass(frozen=True)
class AppliedChange:
    """One rate change as actually applied by a :class:`TraceRunner`."""
    t_s: float          # seconds since the runner started, when the change took effect
    wall_s: float       # time.time() at that moment, to line up with other processes' logs
    trace_t_s: float    # when the trace asked for it
    rates: dict         # {(a, b): mbps} set by this change


class EmulatedWan:
    """One emulated WAN run; a context manager that brings it up and always tears it down."""

    def __init__(self, topology: Topology, run_id: str = None, prefix: str = PREFIX,
                 state_dir=STATE_DIR):
        if run_id is not None and not RUN_RE.match(run_id):
            raise WanError(f"run id {run_id!r} must be 1-6 characters a-z or 0-9")
        if not re.match(r"^[a-z][a-z0-9]{0,15}$", prefix):
            raise WanError(f"prefix {prefix!r} must be a lowercase letter then up to 15 a-z0-9")
        if len(topology.dcs) > MAX_DCS or len(topology.links) > MAX_LINKS:
            raise WanError(f"{topology.source}: the address plan holds {MAX_DCS} DCs and "
                           f"{MAX_LINKS} links")
        self.topology = topology
        self._auto_id = run_id is None
        self.run_id = run_id or new_run_id()
        self.prefix = prefix
        self.state_dir = Path(state_dir)
        self.octet = None
        self._rates = topology.rates()
        self._lock = threading.RLock()
        self._index = {dc: i for i, dc in enumerate(topology.dcs)}

    # --- names and addresses ---------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.state_dir / f"{self.run_id}.json"

    def netns(self, dc: str) -> str:
        self._known(dc)
        return f"{self.prefix}-{self.run_id}-{dc}"

    def exec_prefix(self, dc: str) -> list:
        """Prepend to a command to run it inside ``dc``'s namespace."""
        return ["ip", "netns", "exec", self.netns(dc)]

    def popen(self, dc: str, argv, **kwargs) -> subprocess.Popen:
        """Start ``argv`` inside ``dc``'s namespace."""
        return subprocess.Popen(self.exec_prefix(dc) + list(argv), **kwargs)

    def dc_address(self, dc: str) -> str:
        """The address ``dc``'s processes bind and other DCs reach it at."""
        self._known(dc)
        self._need_octet()
        return f"10.{self.octet}.{self._index[dc]}.1"

    def veth(self, k: int, end: str) -> str:
        """Link k's device at end ``'a'`` or ``'b'`` (15-character limit: ``nw`` + run + k)."""
        return f"nw{self.run_id}-{k}{end}"

    def link_addresses(self, k: int) -> tuple:
        """Link k's (a end, b end) addresses (each in a /30)."""
        self._need_octet()
        base = f"10.{self.octet}.{128 + k // 64}."
        return base + str(4 * (k % 64) + 1), base + str(4 * (k % 64) + 2)

    def _link_index(self, a: str, b: str) -> int:
        self._known(a)
        self._known(b)
        for k, link in enumerate(self.topology.links):
            if {link.a, link.b} == {a, b}:
                return k
        raise WanError(f"no direct link {a}-{b} in topology {self.topology.name!r}; "
                       f"rates are per physical link")

    def _end(self, k: int, dc: str) -> str:
        return "a" if self.topology.links[k].a == dc else "b"

    def _known(self, dc: str) -> None:
        if dc not in self._index:
            raise WanError(f"no DC named {dc!r}; DCs are {list(self.topology.dcs)}")

    def _need_octet(self) -> None:
        if self.octet is None:
            raise WanError(f"run {self.run_id} is not up: it has no addresses yet")

    # --- state file ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _state_lock(self):
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _write_state(self, phase: str) -> None:
        topo = self.topology
        state = {
            "run": self.run_id, "prefix": self.prefix, "octet": self.octet, "phase": phase,
            "pid": os.getpid(), "created": time.time(),
            "topology": {"name": topo.name, "dcs": list(topo.dcs),
                         "links": [[l.a, l.b, l.mbps_ab, l.mbps_ba] for l in topo.links]},
            "rates": [[a, b, mbps] for (a, b), mbps in self._rates.items()],
            "dcs": {dc: {"netns": self.netns(dc), "address": self.dc_address(dc)}
                    for dc in topo.dcs},
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.state_path)

    @classmethod
    def attach(cls, run_id: str, state_dir=STATE_DIR) -> "EmulatedWan":
        """The run ``run_id`` brought up by another process, from its state file."""
        path = Path(state_dir) / f"{run_id}.json"
        try:
            state = json.loads(path.read_text())
        except OSError as exc:
            raise WanError(f"no state file {path} for run {run_id!r}: {exc.strerror}") from exc
        except ValueError as exc:
            raise WanError(f"{path}: not valid JSON: {exc}") from exc
        topo = state["topology"]
        topology = Topology(topo["name"], tuple(topo["dcs"]),
                            tuple(Link(*link) for link in topo["links"]), source=str(path))
        wan = cls(topology, run_id=state["run"], prefix=state["prefix"], state_dir=state_dir)
        wan.octet = state["octet"]
        wan._rates = {(a, b): mbps for a, b, mbps in state["rates"]}
        return wan

    def _used_octets(self) -> set:
        used = set()
        for path in self.state_dir.glob("*.json"):
            if path != self.state_path:
                with contextlib.suppress(OSError, ValueError, KeyError):
                    used.add(json.loads(path.read_text())["octet"])
        return used

    def _reserve(self) -> None:
        """Pick a free run id (if auto) and octet and write the state file, under the lock."""
        with self._state_lock():
            taken = set(list_netns())
            for _ in range(20):
                mine = any(ns.startswith(f"{self.prefix}-{self.run_id}-") for ns in taken)
                if not self.state_path.exists() and not mine:
                    break
                if not self._auto_id:
                    raise WanError(f"run {self.run_id!r} already exists (state file "
                                   f"{self.state_path} or namespaces {self.prefix}-"
                                   f"{self.run_id}-*); bring it down first: "
                                   f"scripts/wan.py down --run {self.run_id}")
                self.run_id = new_run_id()
            else:
                raise WanError(f"no free run id found in {self.state_dir}")
            used = self._used_octets()
            start = zlib.crc32(self.run_id.encode()) % len(OCTETS)
            for step in range(len(OCTETS)):
                octet = OCTETS[(start + step) % len(OCTETS)]
                if octet not in used:
                    self.octet = octet
                    break
            else:
                raise WanError(f"all {len(OCTETS)} address ranges are held by runs in "
                               f"{self.state_dir}; bring some down (down --all)")
            self._write_state("creating")

    # --- up / down -------------------------------------------------------------------------

    def up(self) -> "EmulatedWan":
        """Create every namespace, link, shaper and route; on any failure remove them again."""
        check_available()
        self._reserve()
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        self._write_state("up")
        return self

    def _build(self) -> None:
        topo = self.topology
        _run(["ip", "-batch", "-"],
             input="".join(f"netns add {self.netns(dc)}\n" for dc in topo.dcs))
        for dc in topo.dcs:
            _run(self.exec_prefix(dc) + ["sysctl", "-qw", "net.ipv4.ip_forward=1",
                                         "net.ipv4.conf.all.rp_filter=0",
                                         "net.ipv4.conf.default.rp_filter=0",
                                         "net.ipv6.conf.all.disable_ipv6=1",
                                         "net.ipv6.conf.default.disable_ipv6=1"])
        _run(["ip", "-batch", "-"], input="".join(
            f"link add {self.veth(k, 'a')} netns {self.netns(l.a)} type veth "
            f"peer name {self.veth(k, 'b')} netns {self.netns(l.b)}\n"
            for k, l in enumerate(topo.links)))
        hops = next_hops(topo)
        for dc in topo.dcs:
            ip_cmds = ["link set lo up", f"addr add {self.dc_address(dc)}/32 dev lo"]
            tc_cmds = []
            for k, link in enumerate(topo.links):
                if dc not in (link.a, link.b):
                    continue
                end = self._end(k, dc)
                dev = self.veth(k, end)
                addr = self.link_addresses(k)[0 if end == "a" else 1]
                other = link.b if end == "a" else link.a
                mbps = self._rates[(dc, other)]
                ip_cmds += [f"addr add {addr}/30 dev {dev}",
                            f"link set {dev} gso_max_size 1500 gso_max_segs 1 up"]
                tc_cmds += [f"qdisc add dev {dev} root handle 1: htb default 1",
                            f"class add dev {dev} parent 1: classid 1:1 htb "
                            + " ".join(htb_args(mbps)),
                            f"qdisc add dev {dev} parent 1:1 handle 10: bfifo "
                            f"limit {fifo_limit(mbps)}"]
            for dst in topo.dcs:
                if dst == dc:
                    continue
                nh = hops[(dc, dst)]
                k = self._link_index(dc, nh)
                end = self._end(k, dc)
                via = self.link_addresses(k)[1 if end == "a" else 0]
                ip_cmds.append(f"route add {self.dc_address(dst)}/32 via {via} "
                               f"dev {self.veth(k, end)} src {self.dc_address(dc)}")
            _run(["ip", "-n", self.netns(dc), "-batch", "-"], input="\n".join(ip_cmds) + "\n")
            _run(["tc", "-n", self.netns(dc), "-batch", "-"], input="\n".join(tc_cmds) + "\n")

    def _namespaces(self) -> list:
        mine = f"{self.prefix}-{self.run_id}-"
        return [ns for ns in list_netns() if ns.startswith(mine)]

    def down(self) -> None:
        """Remove exactly what this run made (idempotent) and verify nothing is left.

        Processes still inside the run's namespaces are stopped first (a namespace with
        processes would outlive ``ip netns del`` together with its veths).
        """
        with self._lock:
            remove_namespaces(self._namespaces())
            leftover_links = [name for name in root_links()
                              if name.startswith(f"nw{self.run_id}-")]
            for name in leftover_links:
                _run(["ip", "link", "del", name], check=False)
            left = self._namespaces() + [name for name in root_links()
                                         if name.startswith(f"nw{self.run_id}-")]
            if left:
                raise WanError(f"run {self.run_id}: could not remove {left}")
            with contextlib.suppress(FileNotFoundError):
                self.state_path.unlink()
            self.octet = None

    def __enter__(self) -> "EmulatedWan":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    # --- rates -----------------------------------------------------------------------------

    def set_rate(self, a: str, b: str, mbps: float) -> None:
        """Change the rate of the direction ``a`` -> ``b`` of their direct link (Mbit/s)."""
        self.apply_rates({(a, b): mbps})

    def apply_rates(self, rates: dict) -> None:
        """Change several directions' rates at once (one ``tc -batch`` per namespace)."""
        by_ns = {}
        for (a, b), mbps in rates.items():
            k = self._link_index(a, b)
            if isinstance(mbps, bool) or not isinstance(mbps, (int, float)) or not mbps > 0:
                raise WanError(f"rate {a} -> {b} must be a number > 0 Mbit/s, got {mbps!r}")
            dev = self.veth(k, self._end(k, a))
            by_ns.setdefault(self.netns(a), []).extend([
                f"class change dev {dev} parent 1: classid 1:1 htb " + " ".join(htb_args(mbps)),
                f"qdisc change dev {dev} parent 1:1 handle 10: bfifo limit {fifo_limit(mbps)}"])
        with self._lock:
            for ns, cmds in by_ns.items():
                _run(["tc", "-n", ns, "-batch", "-"], input="\n".join(cmds) + "\n")
            self._rates.update({pair: float(mbps) for pair, mbps in rates.items()})
            if self.state_path.exists():
                self._write_state("up")

    def rates(self) -> dict:
        """The rates currently configured, ``{(a, b): mbps}``."""
        with self._lock:
            return dict(self._rates)

    def link_bytes(self) -> dict:
        """Bytes sent so far in each link direction, ``{(a, b): bytes}`` (the sending veth's
        tx counter, i.e. what left the shaper)."""
        sent = {}
        for dc in self.topology.dcs:
            out = _run(["ip", "-n", self.netns(dc), "-j", "-s", "link", "show"]).stdout
            counters = {dev["ifname"]: dev["stats64"]["tx"]["bytes"] for dev in json.loads(out)}
            for k, link in enumerate(self.topology.links):
                if dc in (link.a, link.b):
                    other = link.b if link.a == dc else link.a
                    sent[(dc, other)] = counters.get(self.veth(k, self._end(k, dc)))
        return sent

    def status(self) -> dict:
        """Namespaces, addresses, links with their current rates and byte counters."""
        present = set(self._namespaces())
        up = bool(present)
        sent = self.link_bytes() if len(present) == len(self.topology.dcs) else {}
        rates = self.rates()
        links = []
        for k, l in enumerate(self.topology.links):
            addr_a, addr_b = self.link_addresses(k) if self.octet is not None else (None, None)
            links.append({"a": l.a, "b": l.b, "veth_a": self.veth(k, "a"),
                          "veth_b": self.veth(k, "b"), "addr_a": addr_a, "addr_b": addr_b,
                          "mbps_ab": rates[(l.a, l.b)], "mbps_ba": rates[(l.b, l.a)],
                          "bytes_ab": sent.get((l.a, l.b)), "bytes_ba": sent.get((l.b, l.a))})
        return {"run": self.run_id, "up": up, "topology": self.topology.name,
                "octet": self.octet, "state_file": str(self.state_path),
                "dcs": {dc: {"netns": self.netns(dc), "present": self.netns(dc) in present,
                             "address": self.dc_address(dc) if self.octet is not None else None}
                        for dc in self.topology.dcs},
                "links": links}


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


class TraceRunner:
    """A thread applying a trace's rate changes to ``wan`` at the trace's times.

    ``applied`` records every change as it took effect (:class:`AppliedChange`), so a
    benchmark can compare its bandwidth estimates with the truth (:meth:`rates_at`).
    """

    def __init__(self, wan: EmulatedWan, trace):
        self.wan = wan
        self.trace = sorted(trace, key=lambda item: item[0])
        self.applied = []
        self.error = None
        self._initial = wan.rates()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trace-runner", daemon=True)
        self.started = None

    def start(self) -> "TraceRunner":
        self.started = time.monotonic()
        self._thread.start()
        return self

    def _loop(self) -> None:
        try:
            for t_s, rates in self.trace:
                if self._stop.wait(max(0.0, self.started + t_s - time.monotonic())):
                    return
                self.wan.apply_rates(rates)
                self.applied.append(AppliedChange(time.monotonic() - self.started, time.time(),
                                                  t_s, dict(rates)))
        except Exception as exc:  # reported by stop()
            self.error = exc

    def done(self) -> bool:
        return self.started is not None and not self._thread.is_alive()

    def wait(self, timeout: float = None) -> bool:
        """Wait until every change is applied; True if finished."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop applying changes; re-raise an error the thread hit."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self.error is not None:
            raise WanError(f"trace runner failed: {self.error}") from self.error

    def rates_at(self, t_s: float) -> dict:
        """The true rates at ``t_s`` seconds after start (per :attr:`applied`)."""
        current = dict(self._initial)
        for change in list(self.applied):
            if change.t_s > t_s:
                break
            current.update(change.rates)
        return current

    def __enter__(self) -> "TraceRunner":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- CLI -------------------------------------------------------------------------------------

@contextlib.contextmanager
def terminate_raises():
    """While inside, SIGTERM and SIGHUP raise SystemExit in the main thread, so ``with``
    blocks (and their ``down``) unwind as on Ctrl-C."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def _print_up(wan: EmulatedWan, out=sys.stdout) -> None:
    print(f"run {wan.run_id}: topology {wan.topology.name}, {len(wan.topology.dcs)} DCs, "
          f"{len(wan.topology.links)} links, state {wan.state_path}", file=out)
    for dc in wan.topology.dcs:
        print(f"  {dc:<8} {wan.dc_address(dc):<15} ip netns exec {wan.netns(dc)} ...", file=out)
    for l in wan.topology.links:
        print(f"  {l.a}-{l.b}: {l.mbps_ab:g} / {l.mbps_ba:g} Mbit/s", file=out)
    out.flush()


def _topology(args) -> Topology:
    topology = load_topology(args.topology)
    return topology.scaled(args.scale) if args.scale != 1.0 else topology


def _stop_child(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="\n\n".join(__doc__.split("\n\n")[:2]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", default=str(STATE_DIR), help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "run"):
        p = sub.add_parser(name, help="bring a WAN up" if name == "up" else
                           "bring a WAN up, run CMD (in the root namespace), always tear down")
        p.add_argument("topology", help="topology file or built-in name (small, hetero6, "
                                        "paper9)")
        p.add_argument("--run", help="run id (1-6 chars a-z0-9); default: random")
        p.add_argument("--scale", type=float, default=1.0, help="multiply every rate")
        p.add_argument("--prefix", default=PREFIX, help=argparse.SUPPRESS)
        if name == "run":
            p.add_argument("--trace", help="apply a named dynamic trace during CMD "
                                           "(paper9-fluctuating)")
            p.add_argument("--period", type=float, default=180.0,
                           help="trace period, s (default: the paper's 180)")
            p.usage = "wan.py run TOPOLOGY [--run ID] [--scale F] [--trace NAME] -- CMD ..."
    p = sub.add_parser("down", help="remove a run (or every run)")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--run")
    group.add_argument("--all", action="store_true")
    p.add_argument("--prefix", default=PREFIX, help=argparse.SUPPRESS)
    p = sub.add_parser("status", help="JSON status of a run, or the list of runs")
    p.add_argument("--run")
    p = sub.add_parser("set-rate", help="change one direction's rate")
    p.add_argument("--run", required=True)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("mbps", type=float)
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = []
    if "--" in argv:            # everything after the first -- is CMD, untouched by argparse
        cut = argv.index("--")
        argv, cmd = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    if cmd and args.command != "run":
        parser.error(f"only 'run' takes a command after --, not {args.command!r}")
    state_dir = Path(args.state_dir)

    try:
        if args.command == "up":
            wan = EmulatedWan(_topology(args), run_id=args.run, prefix=args.prefix,
                              state_dir=state_dir)
            with terminate_raises():
                wan.up()
            _print_up(wan)
        elif args.command == "run":
            if not cmd:
                parser.error("run needs a command after --")
            trace = load_trace(args.trace, period_s=args.period) if args.trace else None
            topology = _topology(args)
            if trace is not None:   # --scale applies to the trace's rates too
                trace = [(t, {pair: mbps * args.scale for pair, mbps in rates.items()})
                         for t, rates in trace]
                topology = topology.with_rates(trace[0][1])
            with terminate_raises(), \
                    EmulatedWan(topology, run_id=args.run, prefix=args.prefix,
                                state_dir=state_dir) as wan:
                _print_up(wan, out=sys.stderr)
                env = dict(os.environ, NETSTORM_WAN_RUN=wan.run_id,
                           NETSTORM_WAN_STATE=str(wan.state_path))
                runner = TraceRunner(wan, trace).start() if trace is not None else None
                child = subprocess.Popen(cmd, env=env)
                try:
                    code = child.wait()
                finally:
                    _stop_child(child)
                    if runner is not None:
                        runner.stop()
            return code
        elif args.command == "down":
            if args.all:
                runs = down_all(args.prefix, state_dir)
                print(f"removed runs: {' '.join(runs) or '(none)'}")
            else:
                path = state_dir / f"{args.run}.json"
                if path.exists():
                    EmulatedWan.attach(args.run, state_dir).down()
                else:   # no state file (e.g. removed by hand): go by namespace names
                    if not RUN_RE.match(args.run):
                        raise WanError(f"run id {args.run!r} must be 1-6 characters a-z or 0-9")
                    remove_namespaces([ns for ns in list_netns()
                                       if ns.startswith(f"{args.prefix}-{args.run}-")])
                print(f"removed run {args.run}")
        elif args.command == "status":
            if args.run:
                print(json.dumps(EmulatedWan.attach(args.run, state_dir).status(), indent=1))
            else:
                runs = {}
                for path in sorted(state_dir.glob("*.json")):
                    with contextlib.suppress(OSError, ValueError, KeyError):
                        state = json.loads(path.read_text())
                        runs[state["run"]] = {"topology": state["topology"]["name"],
                                              "phase": state["phase"], "pid": state["pid"],
                                              "dcs": state["dcs"]}
                print(json.dumps(runs, indent=1))
        elif args.command == "set-rate":
            EmulatedWan.attach(args.run, state_dir).set_rate(args.a, args.b, args.mbps)
    except (WanError, TopologyError) as exc:
        print(f"wan.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wan.py: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
