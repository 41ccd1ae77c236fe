"""launcher/port_plan.py and launcher/preflight.py without sockets: the ports every process
listens on and dials, the placement printed per host, and ``--check``'s verdicts from its
agents' answers (a fake agent stands for the process on each host). The live checks are in
tests/cluster/test_multihost_firewall.py."""

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from netstorm.geoserver.config.cluster import load_cluster, parse_cluster
from netstorm.launcher import cli, port_plan, preflight

TWO_HOST = Path(__file__).resolve().parents[2] / "docs" / "cluster.two-host.toml"


@pytest.fixture
def two_host():
    return load_cluster(TWO_HOST)


def test_the_two_host_example_loads_with_every_port_fixed(two_host):
    endpoints = port_plan.plan(two_host)
    assert all(e.fixed for e in endpoints) and not port_plan.random_across_hosts(endpoints)
    assert [(e.what, e.host, e.ports()) for e in endpoints] == [
        ("scheduler", "10.0.0.1", "9000"),
        ("server eu", "10.0.0.1", "9100"), ("bulk eu", "10.0.0.1", "9101"),
        ("workers eu", "10.0.0.1", "40000-40001"),
        ("server us", "10.0.0.2", "9100"), ("bulk us", "10.0.0.2", "9101"),
        ("workers us", "10.0.0.2", "40000-40001")]
    # what the file's header comment tells a firewall to open, host by host
    assert port_plan.inbound_ports(endpoints, "10.0.0.1") == [(9000, 9000), (9100, 9100),
                                                              (9101, 9101)]
    assert port_plan.inbound_ports(endpoints, "10.0.0.2") == [(9100, 9100), (9101, 9101),
                                                              (40000, 40001)]
    text = TWO_HOST.read_text()
    assert "10.0.0.1 (eu): 9000 (scheduler), 9100 (server eu), 9101 (bulk eu)" in text
    assert "10.0.0.2 (us): 9100 (server us), 9101 (bulk us), 40000-40001" in text


def test_who_dials_what(two_host):
    endpoints = {e.what: e for e in port_plan.plan(two_host)}
    assert endpoints["scheduler"].dialers == ("10.0.0.1", "10.0.0.2")
    assert endpoints["workers us"].dialers == ("10.0.0.1",)     # the scheduler only
    assert endpoints["bulk eu"].dialers == ("10.0.0.2",)
    assert [e.what for e in port_plan.outbound(port_plan.plan(two_host), "10.0.0.2")] == [
        "scheduler", "server eu", "bulk eu"]


def test_a_dc_spanning_hosts_has_its_server_dial_its_remote_workers():
    config = parse_cluster({
        "scheduler": {"host": "10.0.0.1", "port": 9000},
        "dc": [{"name": "eu", "host": "10.0.0.1", "server_port": 0, "workers": 3,
                "worker_hosts": ["10.0.0.1", "10.0.0.2"]}],
        "security": {"curve": False}}, "c.toml")
    endpoints = port_plan.plan(config)
    remote = [e for e in endpoints if e.what == "workers eu" and e.host == "10.0.0.2"][0]
    assert remote.dialers == ("10.0.0.1",) and remote.count == 1
    assert "the server of eu" in remote.who
    assert not any(e.what.startswith("bulk") for e in endpoints)    # one DC, curve off
    # the server's random port and the workers' are dialled from the other host: warned
    assert {e.what for e in port_plan.random_across_hosts(endpoints)} == {"server eu",
                                                                         "workers eu"}
    lines = preflight.placement_lines(config, endpoints)
    assert "host 10.0.0.2: worker eu/1" in lines
    assert any(l.startswith("  listens 10.0.0.1:random") and "server eu" in l for l in lines)


class FakeAgent:
    """Stands for the agent process of ``host``: answers from ``ANSWERS[host]``."""

    ANSWERS: dict = {}
    sent: dict = {}

    def __init__(self, host, argv, how):
        self.host, self.how = host, how
        self.replies = list(self.ANSWERS[host])
        FakeAgent.sent[host] = []

    def send(self, message):
        FakeAgent.sent[self.host].append(message)

    def receive(self, deadline):
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if "listen" in reply:       # the ports bound, in the order they were asked for
            asked = FakeAgent.sent[self.host][0]["listen"]
            reply = {"host": "m", "python": "py", "listen": [
                {"what": what, "bound": list(range(low, low + count)), "busy": []}
                if what not in reply["listen"] else reply["listen"][what]
                for _bind, low, _high, count, what in asked]}
        return reply

    def close(self):
        pass


def run_check(config, monkeypatch, answers) -> tuple:
    FakeAgent.ANSWERS = answers
    monkeypatch.setattr(preflight, "Agent", FakeAgent)
    out = io.StringIO()
    code = preflight.check(config, out=out, command=lambda host: (["agent"], f"fake {host}"))
    return code, out.getvalue()


def test_check_passes_when_every_host_binds_and_reaches(two_host, monkeypatch):
    code, said = run_check(two_host, monkeypatch, {
        "10.0.0.1": [{"listen": {}}, {"probe": [["10.0.0.2", 9100, "server us", ""]]}],
        "10.0.0.2": [{"listen": {}}, {"probe": []}]})
    assert code == 0 and "[check] ok: 2 host(s) reached" in said, said
    # what each agent was asked: its host's fixed ports, then the other host's it dials
    assert FakeAgent.sent["10.0.0.2"][0]["listen"] == [
        ["10.0.0.2", 9100, 9100, 1, "server us"], ["10.0.0.2", 9101, 9101, 1, "bulk us"],
        ["10.0.0.2", 40000, 40001, 2, "workers us"]]
    assert FakeAgent.sent["10.0.0.1"][1]["probe"] == [
        ["10.0.0.2", 9100, "server us"], ["10.0.0.2", 9101, "bulk us"],
        ["10.0.0.2", 40000, "workers us"], ["10.0.0.2", 40001, "workers us"]]


def test_check_names_a_busy_port_an_unreachable_one_and_a_silent_host(two_host,
                                                                      monkeypatch):
    busy = {"workers us": {"what": "workers us", "bound": [40001],
                           "busy": [[40000, "Address already in use"]]}}
    code, said = run_check(two_host, monkeypatch, {
        "10.0.0.1": [RuntimeError("ssh ml@10.0.0.1 exited with code 255: ssh: connect to "
                                  "host 10.0.0.1 port 22: Connection refused")],
        "10.0.0.2": [{"listen": busy}, {"probe": [
            ["10.0.0.1", 9000, "scheduler", "no answer within 3s (dropped by a firewall?)"]]}]})
    problems = [l for l in said.splitlines() if "problem:" in l]
    assert code == 1 and len(problems) == 3, said
    assert "host 10.0.0.1 cannot be reached: ssh ml@10.0.0.1 exited with code 255" in said
    assert ("workers us on 10.0.0.2: cannot bind 10.0.0.2:40000-40001 for 2 workers: in use: "
            "40000 (Address already in use) (DC 'us' worker_ports)") in said
    assert "10.0.0.2 cannot reach scheduler at 10.0.0.1:9000: no answer" in said
    assert "[check] FAILED: 3 problem(s)" in said
    assert len(FakeAgent.sent["10.0.0.1"]) == 1        # a silent host is asked no probes


def test_the_agent_command_goes_over_ssh_for_other_hosts(two_host, monkeypatch):
    monkeypatch.setattr(preflight, "is_local", lambda host: host == "10.0.0.1")
    argv, how = preflight.agent_command(two_host, "10.0.0.2", use_ssh=False)
    assert argv[0] == "ssh" and "ml@10.0.0.2" in argv and how == "ssh ml@10.0.0.2"
    assert argv[-1] == "/opt/netstorm/.venv/bin/python -P -m netstorm.launcher.preflight --agent"
    argv, how = preflight.agent_command(two_host, "10.0.0.1", use_ssh=False)
    assert argv[1:] == ["-P", "-m", "netstorm.launcher.preflight", "--agent"]
    assert preflight.agent_command(two_host, "10.0.0.1", use_ssh=True)[0][0] == "ssh"


def test_the_agent_with_nothing_to_bind_or_dial_answers_both_lines():
    stdin = io.StringIO(json.dumps({"listen": []}) + "\n" + json.dumps({"probe": []}) + "\n")
    out = io.StringIO()
    assert preflight.agent_main(stdin, out) == 0
    first, second = map(json.loads, out.getvalue().splitlines())
    assert first["listen"] == [] and second == {"probe": []}


def test_check_needs_a_cluster_file_and_no_worker_command(capsys):
    args = cli.parse_args(["--cluster", str(TWO_HOST), "--check"])
    assert args.check and args.command == []
    with pytest.raises(SystemExit):
        cli.parse_args(["--dcs", "2", "--check"])
    assert "--check needs --cluster FILE" in capsys.readouterr().err


def test_probes_only_ports_the_far_agent_holds(two_host):
    endpoints = port_plan.plan(two_host)
    assert preflight.probes_for(endpoints, "10.0.0.1", {("10.0.0.2", "server us"): [9100]}) \
        == [["10.0.0.2", 9100, "server us"]]
    assert preflight.probes_for(endpoints, "10.0.0.1", {}) == []
    assert replace(endpoints[0], low=0).ports() == "random"
