"""One emulated WAN run: one network namespace per DC, shaped veth links.

Every DC of a :class:`netstorm.scheduler.topology.Topology` becomes the namespace
``netstorm-<run>-<dc>``; every topology link k becomes one veth pair ``nw<run>-<k>a`` (in
``a``'s namespace) / ``nw<run>-<k>b`` (in ``b``'s), created directly inside the namespaces
(never in the root namespace). Each end's egress is shaped by tc htb (class 1:1 at the
link's rate in that direction, burst max(16 KiB, 5 ms of traffic)) with a bfifo of 100 ms of
traffic (at least 64 KiB) under it (the numbers: :mod:`.shaping`). Each sending veth hands
its shaper segmentation-offload (GSO) packets of at most :func:`.shaping.gso_bytes`: the
htb burst, an eighth of the queue, 64 KiB (a real host's offload size), whichever is
smallest, and never less than one frame. Without offload every 1514-byte frame pays the
kernel's per-packet path (TCP with BBR's per-frame pacing timer, the veth, the shaper, the
forwarding hops): 400 MB at 400 Mbit/s cost this machine 8.9 CPU-s, against 0.3 with
64 KiB packets (``scripts/wan_link_cost.py``, docs/wan.md). Larger packets than the bound
would make the shaper burstier than its own burst, and at a few Mbit/s a drop would cost a
large share of the queue.
htb counts whole frames, so TCP goodput is about 96% of the configured rate (1448 payload
bytes per 1514-byte frame). IPv6 is off in the namespaces.
There is no delay emulation (netem is unavailable).

Address scheme (each run owns one private /16, ``10.<octet>.0.0/16``):

* DC i (its position in ``topology.dcs``) has the DC address ``10.<octet>.<i>.1/32`` on its
  namespace's ``lo``; processes of that DC bind it, and connections between DCs carry it as
  source (every route sets ``src``).
* Link k uses the /30 ``10.<octet>.<128 + k // 64>.<4 * (k % 64)>``: ``.1`` on the ``a`` end,
  ``.2`` on the ``b`` end.
* Every namespace routes each other DC's address along
  :func:`netstorm.wan.routes.shortest_paths` (hop count, deterministic ties, symmetric), with
  ip_forward=1 and rp_filter=0, so traffic between far DCs shares intermediate links.
* ``<octet>`` is picked in 64..191 (starting from a hash of the run id) among those no live
  run's state file holds, under a lock, so two runs never share addresses
  (:mod:`.run_state`). (Namespaces are isolated from each other anyway; the distinct ranges
  keep addresses unambiguous in logs.)

The root namespace has no link into the WAN: run processes with :meth:`EmulatedWan.exec_prefix`
(``ip netns exec <ns>``). Each run keeps a state file ``/run/netstorm-wan/<run>.json``
(written before anything is created) so ``down --run`` works from another invocation and
after a killed run; ``down --all`` removes every ``netstorm-*`` namespace. ``down`` stops
any process still inside the run's namespaces (SIGTERM, then SIGKILL) so their veths vanish.
Needs root; without it (or without ``ip netns``) :class:`WanUnavailable` says why.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import threading
import time
from pathlib import Path

from netstorm.scheduler.topology import Link, Topology

from .netns import (PREFIX, RUN_RE, STATE_DIR, WanError, _run, check_available, list_netns,
                    remove_namespaces, root_links)
from .routes import next_hops
from .run_state import free_octet, read_state, state_lock, write_state
from .shaping import fifo_limit, gso_settings, htb_args

__all__ = ["EmulatedWan", "MAX_DCS", "MAX_LINKS", "new_run_id"]

MAX_DCS = 128                    # third octet 0..127 for DC addresses
MAX_LINKS = 64 * 127             # third octets 128..254 for link /30s, 64 per octet


def new_run_id() -> str:
    return secrets.token_hex(3)[:5]


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

    def _write_state(self, phase: str) -> None:
        topo = self.topology
        state = {
            "run": self.run_id, "prefix": self.prefix, "octet": self.octet, "phase": phase,
            "pid": os.getpid(), "created": time.time(),
            "topology": {"name": topo.name, "dcs": list(topo.dcs),
                         "links": [[l.a, l.b, l.mbps_ab, l.mbps_ba, l.latency_ms]
                                   for l in topo.links]},
            "rates": [[a, b, mbps] for (a, b), mbps in self._rates.items()],
            "dcs": {dc: {"netns": self.netns(dc), "address": self.dc_address(dc)}
                    for dc in topo.dcs},
        }
        write_state(self.state_path, state)

    @classmethod
    def attach(cls, run_id: str, state_dir=STATE_DIR) -> "EmulatedWan":
        """The run ``run_id`` brought up by another process, from its state file."""
        path = Path(state_dir) / f"{run_id}.json"
        state = read_state(path, run_id)
        topo = state["topology"]
        topology = Topology(topo["name"], tuple(topo["dcs"]),
                            tuple(Link(*link) for link in topo["links"]), source=str(path))
        wan = cls(topology, run_id=state["run"], prefix=state["prefix"], state_dir=state_dir)
        wan.octet = state["octet"]
        wan._rates = {(a, b): mbps for a, b, mbps in state["rates"]}
        return wan

    def _reserve(self) -> None:
        """Pick a free run id (if auto) and octet and write the state file, under the lock."""
        with state_lock(self.state_dir):
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
            self.octet = free_octet(self.run_id, self.state_dir, self.state_path)
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
                            f"link set {dev} {gso_settings(mbps)} up"]
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
        by_ns, links_by_ns = {}, {}
        for (a, b), mbps in rates.items():
            k = self._link_index(a, b)
            if isinstance(mbps, bool) or not isinstance(mbps, (int, float)) or not mbps > 0:
                raise WanError(f"rate {a} -> {b} must be a number > 0 Mbit/s, got {mbps!r}")
            dev = self.veth(k, self._end(k, a))
            by_ns.setdefault(self.netns(a), []).extend([
                f"class change dev {dev} parent 1: classid 1:1 htb " + " ".join(htb_args(mbps)),
                f"qdisc change dev {dev} parent 1:1 handle 10: bfifo limit {fifo_limit(mbps)}"])
            links_by_ns.setdefault(self.netns(a), []).append(
                f"link set {dev} {gso_settings(mbps)}")
        with self._lock:
            for ns, cmds in by_ns.items():
                _run(["tc", "-n", ns, "-batch", "-"], input="\n".join(cmds) + "\n")
                _run(["ip", "-n", ns, "-batch", "-"],
                     input="\n".join(links_by_ns[ns]) + "\n")
            self._rates.update({pair: float(mbps) for pair, mbps in rates.items()})
            if self.state_path.exists():
                self._write_state("up")

    def rates(self) -> dict:
        """The rates currently configured, ``{(a, b): mbps}``."""
        with self._lock:
            return dict(self._rates)

    def link_devices(self) -> dict:
        """``{(a, b): (namespace, device)}``: the veth whose transmit counter is the bytes
        sent from ``a`` to ``b`` (in ``a``'s namespace). O(links)."""
        out = {}
        for k, link in enumerate(self.topology.links):
            for dc, other in ((link.a, link.b), (link.b, link.a)):
                out[(dc, other)] = (self.netns(dc), self.veth(k, self._end(k, dc)))
        return out

    def link_bytes(self) -> dict:
        """Bytes sent so far in each link direction, ``{(a, b): bytes}`` (the sending veth's
        tx counter, i.e. what left the shaper). One ``ip`` per DC: to sample often, use
        :class:`netstorm.wan.counters.LinkCounters`."""
        counters = {}
        for dc in self.topology.dcs:
            out = _run(["ip", "-n", self.netns(dc), "-j", "-s", "link", "show"]).stdout
            counters[self.netns(dc)] = {dev["ifname"]: dev["stats64"]["tx"]["bytes"]
                                        for dev in json.loads(out)}
        return {pair: counters[ns].get(dev)
                for pair, (ns, dev) in self.link_devices().items()}

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
