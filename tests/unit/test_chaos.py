"""netstorm.bench.chaos: which process each fault signals (from the launcher's table), what
a link cut asks tc to do, and that every lasting fault is undone, also when the loop is
left early. No process is signalled and no tc runs: os.kill and chaos._tc are recorded."""
import signal
import threading
import time

import pytest
from netstorm.bench import chaos
from netstorm.bench.chaos import FaultLog, FaultLoop, Injector, InjectionError
from netstorm.bench.chaos_spec import Fault


class FakePopen:
    def __init__(self, pid, alive=True):
        self.pid, self.alive = pid, alive

    def poll(self):
        return None if self.alive else -9


class FakeProc:
    def __init__(self, name, pid, alive=True):
        self.name, self.popen = name, FakePopen(pid, alive)


class FakeLauncher:
    def __init__(self):
        self.procs = [FakeProc("scheduler", 10), FakeProc("server dc0", 20),
                      FakeProc("server dc1", 21), FakeProc("worker dc0/0", 30),
                      FakeProc("worker dc1/0", 31), FakeProc("worker dc1/1", 32),
                      FakeProc("worker dc1/10", 33)]


class FakeWan:
    def link_devices(self):
        return {("dc0", "dc1"): ("ns-dc0", "nw-0a"), ("dc1", "dc0"): ("ns-dc1", "nw-0b")}


@pytest.fixture
def calls(monkeypatch):
    seen = []
    monkeypatch.setattr(chaos.os, "kill", lambda pid, sig: seen.append(("kill", pid, sig)))
    monkeypatch.setattr(chaos, "_iptables", lambda ns, verb, chain, dev, check=True:
                        seen.append(("iptables", ns, verb, chain, dev)))
    return seen


def _injector(launcher=None, wan=None):
    launcher = launcher or FakeLauncher()
    return Injector(lambda: launcher, wan, FaultLog()), launcher


@pytest.mark.parametrize("kind, target, pid", [("server", "dc1", 21), ("worker", "dc1/1", 32),
                                               ("scheduler", "scheduler", 10)])
def test_kills_signal_the_named_process(calls, kind, target, pid):
    injector, _ = _injector()
    record = injector.inject(Fault(0, 1.0, kind, target))
    assert calls == [("kill", pid, signal.SIGKILL)] and record["pids"] == [pid]
    assert record["event"] == "inject" and record["kind"] == kind
    assert injector.undo(Fault(0, 1.0, kind, target)) is None      # nothing lasts


def test_a_restarted_process_is_found_in_the_new_entry(calls):
    injector, launcher = _injector()
    launcher.procs[1].popen.alive = False               # the old server dc0 died
    launcher.procs.append(FakeProc("server dc0", 99))   # its replacement
    injector.inject(Fault(0, 1.0, "server", "dc0"))
    assert calls == [("kill", 99, signal.SIGKILL)]


def test_a_missing_target_is_an_error_naming_it(calls):
    injector, launcher = _injector()
    launcher.procs[0].popen.alive = False
    with pytest.raises(InjectionError, match="'scheduler'"):
        injector.inject(Fault(0, 1.0, "scheduler", "scheduler"))
    with pytest.raises(InjectionError, match="link-cut dc0-dc1: needs the emulated WAN"):
        injector.inject(Fault(1, 1.0, "link-cut", "dc0-dc1", 5))
    assert calls == []


def test_dc_stop_stops_the_server_and_its_workers_only_then_continues_them(calls):
    injector, _ = _injector()
    fault = Fault(3, 1.0, "dc-stop", "dc1", 20)
    assert injector.inject(fault)["pids"] == [21, 31, 32, 33]
    assert calls == [("kill", pid, signal.SIGSTOP) for pid in (21, 31, 32, 33)]
    calls.clear()
    assert injector.undo(fault)["event"] == "undo"
    assert calls == [("kill", pid, signal.SIGCONT) for pid in (21, 31, 32, 33)]
    calls.clear()
    assert injector.undo(fault) is None and calls == []             # once


def test_link_cut_drops_on_both_ends_and_undo_removes_both(calls):
    injector, _ = _injector(wan=FakeWan())
    fault = Fault(0, 1.0, "link-cut", "dc1-dc0", 20)
    injector.inject(fault)
    assert calls == [("iptables", "ns-dc1", "-I", "OUTPUT", "nw-0b"),
                     ("iptables", "ns-dc1", "-I", "FORWARD", "nw-0b"),
                     ("iptables", "ns-dc0", "-I", "OUTPUT", "nw-0a"),
                     ("iptables", "ns-dc0", "-I", "FORWARD", "nw-0a")]
    calls.clear()
    injector.undo(fault)
    assert calls == [("iptables", "ns-dc1", "-D", "OUTPUT", "nw-0b"),
                     ("iptables", "ns-dc1", "-D", "FORWARD", "nw-0b"),
                     ("iptables", "ns-dc0", "-D", "OUTPUT", "nw-0a"),
                     ("iptables", "ns-dc0", "-D", "FORWARD", "nw-0a")]
    with pytest.raises(InjectionError, match="no such link"):
        injector.inject(Fault(1, 1.0, "link-cut", "dc0-dc7", 20))


def test_the_iptables_command_lines(monkeypatch):
    seen = []

    class Done:
        returncode, stderr, stdout = 2, "iptables: No chain/target/match by that name.", ""

    monkeypatch.setattr(chaos.subprocess, "run", lambda argv, **kw: seen.append(argv) or Done)
    with pytest.raises(InjectionError, match="No chain/target/match"):
        chaos._iptables("ns", "-I", "OUTPUT", "veth")
    chaos._iptables("ns", "-D", "FORWARD", "veth", check=False)
    assert seen == [["ip", "netns", "exec", "ns", "iptables", "-I", "OUTPUT", "-o", "veth",
                     "-j", "DROP"],
                    ["ip", "netns", "exec", "ns", "iptables", "-D", "FORWARD", "-o", "veth",
                     "-j", "DROP"]]


def test_the_loop_injects_in_order_undoes_after_the_length_and_logs(calls, tmp_path):
    injector, _ = _injector()
    injector.log = FaultLog(tmp_path / "chaos.jsonl")
    faults = [Fault(0, 0.01, "dc-stop", "dc0", 0.02), Fault(1, 0.05, "worker", "dc1/0"),
              Fault(2, 0.06, "server", "dc9")]          # no such server: skipped, logged
    done = threading.Event()
    original = injector.inject

    def inject(fault):
        try:
            return original(fault)
        finally:
            if fault.index == 2:
                done.set()
    injector.inject = inject
    with FaultLoop(injector, faults) as loop:
        loop.begin()
        assert done.wait(30)
    events = [(r["event"], r.get("index")) for r in injector.log.records]
    assert events == [("schedule", 0), ("schedule", 1), ("schedule", 2), ("inject", 0),
                      ("undo", 0), ("inject", 1), ("skip", 2)]
    assert "no live process 'server dc9'" in injector.log.records[-1]["why"]
    assert calls == [("kill", 20, signal.SIGSTOP), ("kill", 30, signal.SIGSTOP),
                     ("kill", 20, signal.SIGCONT), ("kill", 30, signal.SIGCONT),
                     ("kill", 31, signal.SIGKILL)]
    injector.log.close()
    assert len((tmp_path / "chaos.jsonl").read_text().splitlines()) == 7


def test_leaving_the_loop_early_undoes_what_lasts(calls):
    injector, _ = _injector()
    stopped = threading.Event()
    original = injector.inject
    injector.inject = lambda fault: (original(fault), stopped.set())[0]
    with FaultLoop(injector, [Fault(0, 0.0, "dc-stop", "dc0", 3600)]) as loop:
        loop.begin()
        assert stopped.wait(30)
    assert calls[-2:] == [("kill", 20, signal.SIGCONT), ("kill", 30, signal.SIGCONT)]


def test_a_loop_never_begun_injects_nothing(calls):
    started = time.monotonic()
    with FaultLoop(_injector()[0], [Fault(0, 0.0, "scheduler", "scheduler")]):
        pass
    assert calls == [] and time.monotonic() - started < 30


def test_a_half_made_cut_is_undone_at_once(monkeypatch):
    seen = []

    def iptables(ns, verb, chain, dev, check=True):
        if verb == "-I" and len(seen) == 2:
            raise InjectionError("no more rules")
        seen.append((ns, verb, chain))
    monkeypatch.setattr(chaos, "_iptables", iptables)
    injector, _ = _injector(wan=FakeWan())
    with pytest.raises(InjectionError, match="no more rules"):
        injector.inject(Fault(0, 1.0, "link-cut", "dc0-dc1", 20))
    assert seen == [("ns-dc0", "-I", "OUTPUT"), ("ns-dc0", "-I", "FORWARD"),
                    ("ns-dc0", "-D", "OUTPUT"), ("ns-dc0", "-D", "FORWARD")]
