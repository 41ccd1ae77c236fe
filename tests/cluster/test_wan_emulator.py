"""wan_emulator: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_wan_emulator.py."""

import json
import os
import signal
import subprocess
import time

import psutil
import pytest
from launching import needs_wan
from netstorm.scheduler.topology import Link, Topology

from netstorm.wan import EmulatedWan, TraceRunner, WanError, load_topology
from netstorm.wan.netns import STATE_DIR
from netstorm.wan.shaping import FRAME_BYTES, MAX_GSO_BYTES, gso_bytes

from unit.test_wan_emulator import (  # noqa: F401  (fixtures)
    PY,
    TOLERANCE,
    WAN_PY,
    assert_gone,
    helper,
    our_namespaces,
    read_line,
    root_links,
    serve,
    small,
)


def throughput(wan, helper, src, dst, nbytes) -> float:
    """Mbit/s of one TCP transfer src -> dst, timed by the receiver (first chunk excluded)."""
    addr = wan.dc_address(dst)
    recv = wan.popen(dst, [PY, helper, "recv", addr], stdout=subprocess.PIPE, text=True)
    try:
        port = read_line(recv)
        subprocess.run(wan.exec_prefix(src) + [PY, helper, "send", addr, port, str(nbytes)],
                       check=True, timeout=15)
        out, _ = recv.communicate(timeout=15)
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    result = json.loads(out.strip().splitlines()[-1])
    assert result["bytes"] == nbytes
    return (result["bytes"] - result["first"]) * 8 / result["seconds"] / 1e6



def cli(*args, timeout=30):
    return subprocess.run([PY, str(WAN_PY), *args], capture_output=True, text=True,
                          timeout=timeout)


@needs_wan
def test_every_dc_reaches_every_other_from_its_address(small, helper):
    servers = {dc: serve(small, dc, helper) for dc in small.topology.dcs}
    try:
        for src in small.topology.dcs:
            for dst, (_, port) in servers.items():
                if dst == src:
                    continue
                seen = subprocess.run(small.exec_prefix(src) + [
                    PY, helper, "connect", small.dc_address(dst), str(port)],
                    capture_output=True, text=True, timeout=10)
                assert seen.returncode == 0, f"{src} -> {dst}: {seen.stderr}"
                assert seen.stdout.strip() == small.dc_address(src)
    finally:
        for proc, _ in servers.values():
            proc.kill()
            proc.wait()
    status = small.status()
    assert status["up"] and all(d["present"] for d in status["dcs"].values())
    assert len({d["address"] for d in status["dcs"].values()}) == 3


@needs_wan
def test_shaping_and_set_rate(small, helper):
    measured = throughput(small, helper, "dc0", "dc1", 2_000_000)          # ~1.7 s
    print(f"configured 10 Mbit/s, measured {measured:.2f} Mbit/s")
    assert abs(measured / 10 - 1) < TOLERANCE
    done = cli("set-rate", "--run", small.run_id, "dc0", "dc1", "20")      # via the CLI
    assert done.returncode == 0, done.stderr
    small._rates[("dc0", "dc1")] = 20.0
    try:
        faster = throughput(small, helper, "dc0", "dc1", 2_000_000)        # ~0.8 s
        small.set_rate("dc0", "dc1", 5)
        slower = throughput(small, helper, "dc0", "dc1", 600_000)          # ~1 s
        assert small.status()["links"][0]["mbps_ab"] == 5
    finally:
        small.set_rate("dc0", "dc1", 10)
    print(f"configured 20 and 5 Mbit/s, measured {faster:.2f} and {slower:.2f} Mbit/s")
    assert abs(faster / 20 - 1) < TOLERANCE
    assert abs(slower / 5 - 1) < TOLERANCE
    with pytest.raises(WanError, match="must be a number > 0"):
        small.set_rate("dc0", "dc1", 0)


def link_gso(wan, dc, dev) -> tuple:
    out = subprocess.run(["ip", "-n", wan.netns(dc), "-d", "-j", "link", "show", "dev", dev],
                         capture_output=True, text=True, check=True).stdout
    info = json.loads(out)[0]
    return info["gso_max_size"], info["gso_max_segs"]


@needs_wan
def test_offload_follows_the_rate_and_fast_links_keep_their_rate(small, helper):
    assert link_gso(small, "dc0", small.veth(0, "a"))[0] == gso_bytes(10)
    small.set_rate("dc0", "dc1", 200)
    try:
        size, segs = link_gso(small, "dc0", small.veth(0, "a"))
        assert size == gso_bytes(200) == MAX_GSO_BYTES and segs == size // FRAME_BYTES
        assert link_gso(small, "dc1", small.veth(0, "b"))[0] == gso_bytes(10)   # other way
        measured = throughput(small, helper, "dc0", "dc1", 20_000_000)        # ~0.8 s
    finally:
        small.set_rate("dc0", "dc1", 10)
    print(f"configured 200 Mbit/s, measured {measured:.1f} Mbit/s")
    assert abs(measured / 200 - 1) < TOLERANCE
    assert link_gso(small, "dc0", small.veth(0, "a"))[0] == gso_bytes(10)


@needs_wan
@pytest.mark.alone     # each change within 250 ms of its time: 270 ms beside the parallel suite
def test_trace_runner_applies_changes_on_time(small):
    ab, ba = ("dc0", "dc2"), ("dc2", "dc0")
    trace = [(0.0, {ab: 3.0, ba: 4.0}), (0.3, {ab: 6.0}), (0.6, {ab: 10.0, ba: 10.0})]
    runner = TraceRunner(small, trace).start()
    try:
        assert runner.wait(5)
    finally:
        runner.stop()
    assert [c.trace_t_s for c in runner.applied] == [0.0, 0.3, 0.6]
    for change in runner.applied:
        assert change.trace_t_s <= change.t_s < change.trace_t_s + 0.25
    middle = runner.applied[1].t_s + 0.01
    assert runner.rates_at(middle)[ab] == 6.0 and runner.rates_at(middle)[ba] == 4.0
    assert small.rates()[ab] == 10.0
    k = 1                                                # small's link dc0-dc2
    out = subprocess.run(["tc", "-n", small.netns("dc0"), "class", "show", "dev",
                          small.veth(k, "a")], capture_output=True, text=True).stdout
    assert "rate 10Mbit" in out


@needs_wan
@pytest.mark.alone     # a rate within 25%: 3.71 of 5 Mbit/s once beside the parallel suite
def test_partial_mesh_forwards_through_the_middle(helper):
    line = Topology("line", ("a", "b", "c"), (Link("a", "b", 20, 20), Link("b", "c", 20, 20)))
    with EmulatedWan(line) as wan:
        route = subprocess.run(["ip", "-n", wan.netns("a"), "route", "get",
                                wan.dc_address("c")], capture_output=True, text=True).stdout
        assert f"dev {wan.veth(0, 'a')}" in route and f"src {wan.dc_address('a')}" in route
        proc, port = serve(wan, "c", helper)
        try:
            seen = subprocess.run(wan.exec_prefix("a") + [PY, helper, "connect",
                                                          wan.dc_address("c"), str(port)],
                                  capture_output=True, text=True, timeout=10)
        finally:
            proc.kill()
            proc.wait()
        assert seen.stdout.strip() == wan.dc_address("a"), seen.stderr
        before = wan.link_bytes()
        wan.set_rate("b", "c", 5)              # the far hop is the bottleneck
        measured = throughput(wan, helper, "a", "c", 600_000)
        after = wan.link_bytes()
        print(f"a -> b -> c with b -> c at 5 Mbit/s: measured {measured:.2f} Mbit/s")
        assert abs(measured / 5 - 1) < TOLERANCE
        for direction in (("a", "b"), ("b", "c")):
            assert after[direction] - before[direction] >= 600_000
        assert after[("b", "a")] - before[("b", "a")] < 300_000            # only ACKs back
    assert_gone(wan)


@needs_wan
def test_down_on_exception_stops_processes_and_leaves_nothing():
    with pytest.raises(RuntimeError, match="boom"):
        with EmulatedWan(load_topology("small")) as wan:
            assert len(our_namespaces(run=f"{wan.run_id}-")) == 3
            assert wan.state_path.exists()
            sleeper = wan.popen("dc1", ["sleep", "30"])
            raise RuntimeError("boom")
    assert sleeper.wait(5) is not None                   # down stopped it
    assert_gone(wan)
    wan.down()                                           # idempotent


def wait_up(run, timeout=15.0):
    path = STATE_DIR / f"{run}.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads(path.read_text())["phase"] == "up":
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    pytest.fail(f"run {run} did not come up within {timeout}s")


@needs_wan
def test_killed_runs_are_cleaned_by_down_run_and_down_all():
    prefix = f"wt{os.getpid()}"              # down --all with this prefix touches only ours
    runs = [f"k{os.getpid() % 10000}a", f"k{os.getpid() % 10000}b"]
    for run in runs:
        proc = subprocess.Popen([PY, str(WAN_PY), "run", "small", "--run", run,
                                 "--prefix", prefix, "--", "sleep", "60"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        wait_up(run)
        os.killpg(proc.pid, signal.SIGKILL)              # wan.py and its sleep
        proc.wait()
        assert len(our_namespaces(prefix, f"{run}-")) == 3
    try:
        done = cli("down", "--run", runs[0])
        assert done.returncode == 0, done.stderr
        assert our_namespaces(prefix, f"{runs[0]}-") == []
        assert len(our_namespaces(prefix, f"{runs[1]}-")) == 3
        done = cli("down", "--all", "--prefix", prefix)
        assert done.returncode == 0, done.stderr
        assert runs[1] in done.stdout
    finally:
        cli("down", "--all", "--prefix", prefix)
    assert our_namespaces(prefix) == []
    for run in runs:
        assert root_links(run) == []
        assert not (STATE_DIR / f"{run}.json").exists()


@needs_wan
def test_sigterm_tears_down_the_run_command():
    prefix, run = f"wt{os.getpid()}", f"t{os.getpid() % 10000}"
    proc = subprocess.Popen([PY, str(WAN_PY), "run", "small", "--run", run, "--prefix", prefix,
                             "--", "sh", "-c", "echo $$; exec sleep 60"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        child = int(read_line(proc, 15))
        assert len(our_namespaces(prefix, f"{run}-")) == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        cli("down", "--all", "--prefix", prefix)
    try:        # killed; reaped by whoever adopted it, a moment later on a loaded machine
        psutil.Process(child).wait(10)
    except psutil.NoSuchProcess:
        pass
    assert our_namespaces(prefix) == [] and root_links(run) == []


@needs_wan
def test_cli_up_status_down(helper):
    run = f"c{os.getpid() % 10000}"
    done = cli("up", "small", "--run", run, "--scale", "0.5")
    try:
        assert done.returncode == 0, done.stderr
        assert f"run {run}" in done.stdout
        status = json.loads(cli("status", "--run", run).stdout)
        assert status["up"] and [l["mbps_ab"] for l in status["links"]] == [20.0] * 3
        assert all(l["bytes_ab"] is not None for l in status["links"])
        assert run in json.loads(cli("status").stdout)
        again = cli("up", "small", "--run", run)
        assert again.returncode == 2 and "already exists" in again.stderr
    finally:
        done = cli("down", "--run", run)
    assert done.returncode == 0, done.stderr
    assert our_namespaces(run=f"{run}-") == [] and root_links(run) == []
    bad = cli("set-rate", "--run", run, "dc0", "dc1", "5")
    assert bad.returncode == 2 and "no state file" in bad.stderr
