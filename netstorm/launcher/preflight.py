"""``netstorm-launch --cluster FILE --check``: everything a launch needs from the network,
checked without training.

The cluster file is read (every host name resolved, every field checked), then the placement
is printed per host: its processes, the ports they listen on (and who connects to them from
where) and the ports they dial on other hosts (:mod:`.port_plan`). Then an *agent*,
``python -m netstorm.launcher.preflight --agent``, runs on every host: over the ``[ssh]``
path as ``--ssh`` would reach it (every host with ``--ssh``; else the hosts that are not
addresses of this machine), or as a local process. Each agent binds the fixed ports its
host's processes will bind (a port in use is a problem; for ``worker_ports`` as many ports
of the range as the host's workers need), then dials, from its host, every fixed port its
host's processes will dial on another host while the far agent holds it: a port a firewall
drops or rejects is a problem. Random ports that other hosts dial are warned about.

The agent's protocol is JSON lines on its standard input and output: ``{"listen": [[bind,
low, high, count, what], ...]}`` answered with what it bound, then ``{"probe": [[address,
port, what], ...]}`` answered with what it reached; the end of its input ends it (its
listeners close). Exit codes of :func:`check`: 0 (no problem), 1 (problems, listed).
"""
from __future__ import annotations

import json
import os
import selectors
import shlex
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from . import placement, port_plan

__all__ = ["AGENT_REPLY_S", "PROBE_TIMEOUT_S", "Agent", "agent_command", "agent_main", "check",
           "is_local", "listen", "placement_lines", "probe", "probes_for"]

PROBE_TIMEOUT_S = 3.0       # a dial that does not connect within this is a problem
AGENT_REPLY_S = 30.0        # ssh's connect timeout (10 s), the remote Python's start, probes


def is_local(address: str) -> bool:
    """Whether ``address`` is one of this machine's (a socket can bind it here)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError:
            return False
    return True


# ------------------------------------------------------------------ the agent (each host)
def listen(bind: str, low: int, high: int, count: int) -> tuple:
    """Listening sockets on ``count`` ports of ``low..high`` at ``bind``, lowest first (as
    workers take them; SO_REUSEADDR as ZeroMQ): ``(sockets, [[port, why], ...] in use)``.
    O(ports tried)."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    held, busy = [], []
    for port in range(low, high + 1):
        if len(held) == count:
            break
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind, port))
            sock.listen(64)     # the kernel completes handshakes: no accept needed
        except OSError as exc:
            sock.close()
            busy.append([port, exc.strerror or str(exc)])
            continue
        held.append(sock)
    return held, busy


def probe(address: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """"" if a TCP connection to ``address:port`` opens within ``timeout_s``, else why."""
    try:
        socket.create_connection((address, port), timeout=timeout_s).close()
    except socket.timeout:
        return f"no answer within {timeout_s:g}s (dropped by a firewall?)"
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


def agent_main(stdin=None, stdout=None) -> int:
    """The agent: listen as asked, answer, probe as asked, answer, hold the listeners
    until the input ends."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    held = []
    try:
        request = json.loads(stdin.readline() or "{}")
        bound = []
        for bind, low, high, count, what in request.get("listen", []):
            sockets, busy = listen(bind, int(low), int(high), int(count))
            held += sockets
            bound.append({"what": what, "bound": [s.getsockname()[1] for s in sockets],
                          "busy": busy})
        stdout.write(json.dumps({"host": socket.gethostname(), "python": sys.executable,
                                 "listen": bound}) + "\n")
        stdout.flush()
        line = stdin.readline()
        if line:
            targets = json.loads(line).get("probe", [])
            with ThreadPoolExecutor(max_workers=min(32, len(targets) or 1)) as pool:
                why = list(pool.map(lambda t: probe(t[0], int(t[1])), targets))
            stdout.write(json.dumps({"probe": [[*t, w] for t, w in zip(targets, why)]})
                         + "\n")
            stdout.flush()
            stdin.read()        # until the checking host closes the input
    finally:
        for sock in held:
            sock.close()
    return 0


# ------------------------------------------------------------------ the checking host
class Agent:
    """One host's agent process, spoken to in JSON lines."""

    def __init__(self, host: str, argv: list, how: str):
        self.host, self.how = host, how
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self._buffer = b""

    def send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass        # it ended: receive() says why

    def receive(self, deadline: float) -> dict:
        """The agent's next line; RuntimeError saying why there is none."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise RuntimeError(f"no answer within {AGENT_REPLY_S:g}s ({self.how})")
                data = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not data:
                    self.proc.wait()
                    err = self.proc.stderr.read().decode(errors="replace").strip()
                    raise RuntimeError(f"{self.how} exited with code {self.proc.returncode}"
                                       + (f": {err.splitlines()[-1]}" if err else ""))
                self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def placement_lines(config, endpoints) -> list:
    """The placement per host: its processes, what they listen on (who dials in, from
    where), what they dial on other hosts. O(hosts * endpoints)."""
    lines = []
    for host in placement.hosts(config):
        lines.append(f"host {host}: {placement.on_host(config, host).describe()}")
        for e in (e for e in endpoints if e.host == host):
            at = f"{e.bind}:{e.ports()}" + (f" (reached at {e.reached})"
                                             if e.bind != e.reached else "")
            remote = [d for d in e.dialers if d != host]
            lines.append(f"  listens {at:<32} {e.what:<14} <- {e.who}"
                         + (f" (from {', '.join(remote)})" if remote else " (this host only)"))
        for e in port_plan.outbound(endpoints, host):
            lines.append(f"  dials   {e.reached + ':' + e.ports():<32} {e.what}")
    return lines


def probes_for(endpoints, host: str, bound: dict) -> list:
    """What ``host``'s agent dials: each port another host's agent holds for an endpoint
    this host's processes dial (``bound``: ``{(host, what): [ports]}``)."""
    return [[e.reached, port, e.what] for e in port_plan.outbound(endpoints, host)
            for port in bound.get((e.host, e.what), [])]


def agent_command(config, host: str, use_ssh: bool) -> tuple:
    """``(argv, how)``: the agent of ``host`` over ``[ssh]`` (with ``use_ssh``, or for an
    address not of this machine), else a local process."""
    if use_ssh or not is_local(host):
        python = config.ssh.python or sys.executable
        remote = shlex.join([python, "-P", "-m", "netstorm.launcher.preflight", "--agent"])
        return config.ssh.argv(host) + [remote], f"ssh {config.ssh.destination(host)}"
    return [sys.executable, "-P", "-m", "netstorm.launcher.preflight", "--agent"], "a local process"


def check(config, use_ssh: bool = False, out=None, command=None) -> int:
    """Check ``config``'s network as the module says; prints the placement and a summary
    to ``out``. ``command(host)``: the agent's ``(argv, how)`` (default:
    :func:`agent_command`; a test runs it in a network namespace). 0: no problem; 1:
    problems (each printed)."""
    out = out or sys.stdout
    command = command or (lambda host: agent_command(config, host, use_ssh))

    def say(text: str) -> None:
        print(f"[check] {text}", file=out, flush=True)

    endpoints = port_plan.plan(config)
    hosts = placement.hosts(config)
    say(f"{config.source}: {len(hosts)} host(s), {len(config.dcs)} DC(s), "
        f"{config.num_workers} worker(s); every host name resolved")
    for line in placement_lines(config, endpoints):
        say(line)
    problems, warnings, bound = [], [], {}
    for e in port_plan.random_across_hosts(endpoints):
        warnings.append(f"{e.what} on {e.host} listens on a random port that processes on "
                        f"{', '.join(d for d in e.dialers if d != e.host)} dial: a firewall "
                        f"between them must let any port through; fix it with {e.field}")
    agents = {host: Agent(host, *command(host)) for host in hosts}
    try:
        for host, agent in agents.items():
            agent.send({"listen": [[e.bind, e.low, e.high, e.count, e.what]
                                   for e in endpoints if e.host == host and e.fixed]})
        deadline = time.monotonic() + AGENT_REPLY_S
        answered = {}
        for host, agent in agents.items():
            try:
                answered[host] = reply = agent.receive(deadline)
            except RuntimeError as exc:
                problems.append(f"host {host} cannot be reached: {exc}")
                continue
            say(f"host {host} answered ({agent.how}; machine {reply.get('host')}, "
                f"{reply.get('python')})")
            for item, e in zip(reply.get("listen", []),
                               [e for e in endpoints if e.host == host and e.fixed]):
                bound[(host, e.what)] = item["bound"]
                if len(item["bound"]) < e.count:
                    busy = ", ".join(f"{p} ({why})" for p, why in item["busy"])
                    problems.append(f"{e.what} on {host}: cannot bind {e.bind}:{e.ports()}"
                                    + (f" for {e.count} workers" if e.count > 1 else "")
                                    + f": in use: {busy} ({e.field})")
        for host in answered:
            agents[host].send({"probe": probes_for(endpoints, host, bound)})
        deadline = time.monotonic() + AGENT_REPLY_S
        for host in answered:
            try:
                results = agents[host].receive(deadline).get("probe", [])
            except RuntimeError as exc:
                problems.append(f"host {host} stopped answering: {exc}")
                continue
            for address, port, what, why in results:
                if why:
                    problems.append(f"{host} cannot reach {what} at {address}:{port}: {why}")
            if results:
                say(f"host {host} reached {sum(1 for r in results if not r[3])} of "
                    f"{len(results)} port(s) on other hosts")
    finally:
        for agent in agents.values():
            agent.close()
    for text in warnings:
        say(f"warning: {text}")
    for text in problems:
        say(f"problem: {text}")
    if problems:
        say(f"FAILED: {len(problems)} problem(s), {len(warnings)} warning(s)")
        return 1
    say(f"ok: {len(hosts)} host(s) reached, every fixed port free where it binds and "
        f"reachable where it is dialled; {len(warnings)} warning(s)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--agent"]:
        sys.exit("usage: python -m netstorm.launcher.preflight --agent (started by "
                 "netstorm-launch --check)")
    sys.exit(agent_main())
