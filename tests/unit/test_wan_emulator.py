"""The emulated WAN (netstorm.wan.emulator, scripts/wan.py) for real: namespaces, shaped veths,
forwarding, cleanup.

Needs root and ``ip netns``; skipped otherwise. Only sends traffic between namespaces these
tests create, and removes them. About 20 s.
"""

import os
import select
import subprocess
import sys
import pytest
from launching import REPO
from netstorm.wan import EmulatedWan, WanUnavailable, load_topology

WAN_PY = REPO / "scripts" / "wan.py"
PY = sys.executable
TOLERANCE = 0.25
NET_HELPER = r'''
import json, socket, sys, time
mode, host = sys.argv[1], sys.argv[2]
if mode == "serve":      # answer every connection with the address it came from
    srv = socket.create_server((host, 0))
    print(srv.getsockname()[1], flush=True)
    while True:
        conn, peer = srv.accept()
        conn.sendall(peer[0].encode())
        conn.close()
elif mode == "connect":  # connect HOST PORT: print what the server saw as our address
    with socket.create_connection((host, int(sys.argv[3])), timeout=2) as s:
        print(s.recv(100).decode(), flush=True)
elif mode == "recv":     # print port; after EOF print JSON {bytes, first, seconds}
    srv = socket.create_server((host, 0))
    print(srv.getsockname()[1], flush=True)
    srv.settimeout(10)
    conn, _ = srv.accept()
    conn.settimeout(10)
    total, first, t_first, t_last = 0, 0, None, None
    while True:
        data = conn.recv(1 << 16)
        if not data:
            break
        now = time.monotonic()
        if t_first is None:
            t_first, first = now, len(data)
        total, t_last = total + len(data), now
    conn.close()
    print(json.dumps({"bytes": total, "first": first, "seconds": t_last - t_first}), flush=True)
elif mode == "send":     # send HOST PORT NBYTES
    with socket.create_connection((host, int(sys.argv[3])), timeout=10) as s:
        s.sendall(b"x" * int(sys.argv[4]))
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
'''


@pytest.fixture(scope="module")
def helper(tmp_path_factory):
    path = tmp_path_factory.mktemp("wan") / "net_helper.py"
    path.write_text(NET_HELPER)
    return str(path)


@pytest.fixture(scope="module")
def small(helper):
    """``small`` scaled to 10 Mbit/s each way, shared by the tests that restore its rates."""
    with EmulatedWan(load_topology("small").scaled(0.25)) as wan:
        yield wan
    assert_gone(wan)


def read_line(proc, timeout=5.0) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        pytest.fail(f"no output from {proc.args} within {timeout}s")
    return proc.stdout.readline().strip()


def serve(wan, dc, helper):
    proc = wan.popen(dc, [PY, helper, "serve", wan.dc_address(dc)], stdout=subprocess.PIPE,
                     text=True)
    return proc, int(read_line(proc))


def our_namespaces(prefix="netstorm", run=""):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [l.split()[0] for l in out.splitlines() if l.startswith(f"{prefix}-{run}")]


def root_links(run):
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if f"nw{run}-" in l]


def assert_gone(wan):
    assert our_namespaces(wan.prefix, f"{wan.run_id}-") == []
    assert root_links(wan.run_id) == []
    assert not wan.state_path.exists()


def test_unavailable_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(WanUnavailable, match="needs root.*uid 1000"):
        EmulatedWan(load_topology("small")).up()
