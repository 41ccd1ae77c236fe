"""Multi-host networking, live: two network namespaces (one DC each, the scheduler in the
first) whose only traffic between them is the ports docs/launch.md's "Networking" section
lists (iptables in each namespace: INPUT dropped except loopback, established connections
and those ports), with the fixed ports of a cluster file; a 2-DC cluster trains across them.
Before, a port outside that set is checked to be really blocked, and ``--check`` (its
agents in the namespaces) names b's worker ports, and only them, while they are closed."""

import subprocess
import sys
import threading
import tomllib

import pytest
from launching import WORKERS, needs_wan

from netstorm.geoserver.config.cluster import parse_cluster
from netstorm.geoserver.core import bulk_channel
from netstorm.launcher import port_plan

PY = sys.executable
ROUNDS = 5
LISTEN = ("import socket, sys\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); print('ready', flush=True)\n"
          "s.accept()[0].close()\n")
CONNECT = ("import socket, sys\n"
           "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.5).close()\n")


def cluster_text(a: str, b: str) -> str:
    """DC a (1 worker, with the scheduler) on ``a``, DC b (2 workers) on ``b``; every port
    fixed."""
    return f"""
[scheduler]
host = "{a}"
port = 9000

[[dc]]
name = "a"
host = "{a}"
server_port = 9100
bulk_port = 9101
workers = 1
worker_ports = "40000-40000"

[[dc]]
name = "b"
host = "{b}"
server_port = 9100
bulk_port = 9101
workers = 2
worker_ports = "40000-40001"

[transport]
timeout_s = 30
"""


def firewall(wan, dc: str, ranges) -> None:
    """Drop every connection into ``dc``'s namespace except loopback, established ones and
    the TCP port ``ranges`` (the namespace's deletion removes the rules)."""
    rules = [["-P", "INPUT", "DROP"], ["-A", "INPUT", "-i", "lo", "-j", "ACCEPT"],
             ["-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED",
              "-j", "ACCEPT"]]
    rules += [["-A", "INPUT", "-p", "tcp", "--dport", f"{low}:{high}", "-j", "ACCEPT"]
              for low, high in ranges]
    for rule in rules:
        subprocess.run(wan.exec_prefix(dc) + ["iptables", *rule], check=True, timeout=10,
                       capture_output=True)


def connects(wan, src: str, dst: str, port: int) -> bool:
    """Whether a process in ``src`` opens a TCP connection to a listener on ``dst``'s
    address and ``port`` (the listener is started here and stopped after)."""
    address = wan.dc_address(dst)
    listener = wan.popen(dst, [PY, "-c", LISTEN, address, str(port)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "ready"
        dial = subprocess.run(wan.exec_prefix(src) + [PY, "-c", CONNECT, address, str(port)],
                              capture_output=True, text=True, timeout=20)
        return dial.returncode == 0
    finally:
        listener.kill()
        listener.wait()


def preflight(wan, config) -> tuple:
    """``netstorm-launch --check``'s result and output, each host's agent run in its DC's
    namespace (where ssh would run it on a real host)."""
    import io

    from netstorm.launcher import preflight as check
    where = {wan.dc_address(dc): dc for dc in ("a", "b")}
    out = io.StringIO()
    code = check.check(config, out=out, command=lambda host: (
        wan.exec_prefix(where[host]) + [PY, "-m", "netstorm.launcher.preflight", "--agent"],
        f"ip netns exec {where[host]}"))
    return code, out.getvalue()


@needs_wan
@pytest.mark.system_package("iptables")
def test_two_namespaces_with_only_the_documented_ports_open_train_across(tmp_path):
    from netstorm import launcher as launch
    from netstorm import wan as wanlib
    from netstorm.scheduler.topology import Link, Topology
    topology = Topology("two-hosts", ("a", "b"), (Link("a", "b", 1000.0, 1000.0),))
    log = tmp_path / "run.log"
    with wanlib.EmulatedWan(topology) as wan:
        config = parse_cluster(
            tomllib.loads(cluster_text(wan.dc_address("a"), wan.dc_address("b"))),
            "two-hosts.toml")
        endpoints = port_plan.plan(config)
        opened = {dc: port_plan.inbound_ports(endpoints, wan.dc_address(dc))
                  for dc in ("a", "b")}
        assert opened == {"a": [(9000, 9000), (9100, 9100), (9101, 9101)],
                          "b": [(9100, 9100), (9101, 9101), (40000, 40001)]}
        firewall(wan, "a", opened["a"])
        firewall(wan, "b", opened["b"][:-1])            # b's worker ports not open yet
        assert not connects(wan, "a", "b", 45000)       # a port outside the set is blocked
        # --check, its agents in the namespaces: b's two worker ports, and nothing else,
        # are named unreachable (from a, where the scheduler dials them)
        code, said = preflight(wan, config)
        problems = [l for l in said.splitlines() if "problem:" in l]
        assert code == 1 and len(problems) == 2, said
        assert all(f"cannot reach workers b at {config.dc('b').host}:4000" in l
                   for l in problems), said
        assert "reached 2 of 4 port(s)" in said and "reached 3 of 3 port(s)" in said, said
        firewall(wan, "b", opened["b"][-1:])
        result = {}
        command = [PY, str(WORKERS / "fault_worker.py"), "loop", str(ROUNDS), "4096"]
        with open(log, "w") as out:
            runner = threading.Thread(target=lambda: result.update(code=launch.run_cluster(
                config, command, wrap_dc=wan.exec_prefix, out=out)))
            runner.start()
            runner.join(150)
        text = log.read_text()
        assert not runner.is_alive(), f"the cluster did not finish:\n{text[-4000:]}"
    assert result.get("code") == 0, text[-4000:]
    assert text.count(f"finished {ROUNDS} rounds") == 3, text[-4000:]
    assert f"at tcp://{config.dc('b').host}:9100" in text       # the server bound its port
    if not bulk_channel.unavailable():      # chunks crossed on the fixed bulk ports
        assert text.count("go sealed on the bulk channel") == 2, text[-4000:]
