#!/usr/bin/env python3
"""What one emulated link costs this machine's CPU: one TCP flow through one shaped veth pair.

Brings up a 2-DC emulated WAN (``netstorm.wan.EmulatedWan``) at ``--mbps``, sends
``--mbytes`` MB from dc0 to dc1 (a Python sender and receiver with 1 MiB buffers, so the
kernel's work dominates), and prints the transfer time and the machine's busy CPU seconds
over it (all cores, softirq included, from /proc/stat). ``--gso BYTES`` overrides the
offload bound the emulator sets on both veths (1500 = no offload, as before 2026-11-25),
to measure what offload saves. Needs root; removes what it made. See docs/wan.md.

    sudo python scripts/wan_link_cost.py --mbps 400 --mbytes 400
    sudo python scripts/wan_link_cost.py --mbps 400 --mbytes 400 --gso 1500
"""
import argparse
import os
import subprocess
import sys
import time

from netstorm.scheduler.topology import Link, Topology
from netstorm.wan import EmulatedWan
from netstorm.wan.shaping import FRAME_BYTES, MAX_GSO_BYTES, gso_bytes

__all__ = ["busy_ticks", "main"]


FLOW = r'''
import socket, sys
role, host, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
view = memoryview(bytearray(1 << 20))
if role == "recv":
    srv = socket.create_server((host, 0))
    print(srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    got = 0
    while got < nbytes:
        n = conn.recv_into(view)
        if not n:
            sys.exit("connection closed early")
        got += n
    conn.sendall(b"k")
else:
    conn = socket.create_connection((host, int(sys.argv[4])))
    sent = 0
    while sent < nbytes:
        n = min(len(view), nbytes - sent)
        conn.sendall(view[:n])
        sent += n
    conn.recv(1)
'''


def busy_ticks() -> tuple:
    """(busy, softirq) clock ticks of all cores so far (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return user + nice + system + irq + softirq, softirq


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mbps", type=float, default=400.0, help="link rate, Mbit/s")
    ap.add_argument("--mbytes", type=float, default=400.0, help="MB (1e6 bytes) to send")
    ap.add_argument("--gso", type=int, default=None,
                    help=f"offload bound in bytes ({FRAME_BYTES}..{MAX_GSO_BYTES}); "
                         "default: the emulator's own")
    args = ap.parse_args(argv)
    if args.gso is not None and not FRAME_BYTES <= args.gso <= MAX_GSO_BYTES:
        ap.error(f"--gso must be in {FRAME_BYTES}..{MAX_GSO_BYTES}, got {args.gso}")
    if not args.mbps > 0 or not args.mbytes > 0:
        ap.error("--mbps and --mbytes must be > 0")
    nbytes = int(args.mbytes * 1e6)
    topo = Topology("cost", ("dc0", "dc1"), (Link("dc0", "dc1", args.mbps, args.mbps),))
    with EmulatedWan(topo) as wan:
        gso = gso_bytes(args.mbps) if args.gso is None else args.gso
        for dc, end in (("dc0", "a"), ("dc1", "b")):
            subprocess.run(["ip", "-n", wan.netns(dc), "link", "set", wan.veth(0, end),
                            "gso_max_size", str(gso), "gso_max_segs",
                            str(max(1, gso // FRAME_BYTES))], check=True)
        addr = wan.dc_address("dc1")
        recv = wan.popen("dc1", [sys.executable, "-c", FLOW, "recv", addr, str(nbytes)],
                         stdout=subprocess.PIPE, text=True)
        # a failure is named; the emulator's teardown stops the receiver either way
        port = recv.stdout.readline().strip()
        if not port.isdigit():
            print("wan_link_cost: the receiver in dc1 did not start", file=sys.stderr)
            return 1
        busy0, soft0 = busy_ticks()
        t0 = time.monotonic()
        sent = subprocess.run(wan.exec_prefix("dc0") + [sys.executable, "-c", FLOW, "send",
                                                        addr, str(nbytes), port])
        seconds = time.monotonic() - t0
        busy1, soft1 = busy_ticks()
        if sent.returncode != 0:
            print(f"wan_link_cost: the sender in dc0 failed (exit {sent.returncode})",
                  file=sys.stderr)
            return 1
        if recv.wait(timeout=30) != 0:
            print("wan_link_cost: the receiver in dc1 failed", file=sys.stderr)
            return 1
    hz = os.sysconf("SC_CLK_TCK")
    print(f"{args.mbytes:g} MB at {args.mbps:g} Mbit/s, offload packets <= {gso} B: "
          f"{seconds:.2f} s ({nbytes * 8 / seconds / 1e6:.0f} Mbit/s), machine busy "
          f"{(busy1 - busy0) / hz:.2f} CPU-s, of it softirq {(soft1 - soft0) / hz:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
