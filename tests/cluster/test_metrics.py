"""metrics: a live 3-DC cluster scraped while it trains, its series checked against the
scheduler's stats file of the same run; a taken port refused naming the field. The
collectors alone, with fakes: tests/unit/test_scheduler_metrics.py,
tests/unit/test_server_metrics.py."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from fakes import samples_of
from launching import REPO, free_port, leftovers, worker_cmd
from netstorm.geoserver.config.cluster import ClusterConfig, DataCenter, Link
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.metrics import MetricsConfig, MetricsError
from netstorm.geoserver.core.metrics import serve_metrics
from netstorm.scheduler.planning import cut_lower_bound_s
from netstorm.scheduler.topology import Topology

DCS = ("dc0", "dc1", "dc2")
ROUNDS, STEP_S = 24, 0.25       # 4 rounds a second: each is judged (trust) long before the
                                # scheduler forgets it (16 rounds kept, a tick a second)
KEY_ELEMENTS = 256 * 256


def scrape(target: str) -> dict:
    """``{(name, labels as a sorted tuple): value}`` of one endpoint, parsed by
    prometheus_client's own parser."""
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as reply:
        return samples_of(reply.read().decode())


def series(samples: dict, name: str, **labels) -> dict:
    """The samples of ``name`` whose labels include ``labels``: {labels dict items: value}."""
    return {key[1]: value for key, value in samples.items() if key[0] == name and
            all((k, v) in key[1] for k, v in labels.items())}


def one(samples: dict, name: str, **labels) -> float:
    found = series(samples, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return next(iter(found.values()))


def by_link(samples: dict, name: str) -> dict:
    return {dict(labels)["link"]: value for labels, value in series(samples, name).items()}


def wait_for(condition, what: str, timeout_s: float, proc):
    deadline = time.monotonic() + timeout_s
    while True:
        got = condition()
        if got:
            return got
        assert proc.poll() is None, f"the cluster ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g}s"
        time.sleep(0.1)


def running(samples: dict) -> dict | None:
    """``samples`` once round 6 is open, round 4 completed and link estimates logged."""
    def at_least(name, least):
        found = series(samples, name)
        return len(found) == 1 and next(iter(found.values())) >= least
    if at_least("netstorm_round_opened", 6) and at_least("netstorm_rounds_completed", 4) \
            and by_link(samples, "netstorm_link_estimated_mbps"):
        return samples
    return None


def targets(folder) -> dict:
    """file_sd entries written so far: {role/dc name: "host:port"}."""
    found = {}
    for path in folder.glob("netstorm-*.json") if folder.exists() else ():
        (group,) = json.loads(path.read_text())
        labels = group["labels"]
        found[labels.get("netstorm_dc", labels["netstorm_role"])] = group["targets"][0]
    return found


@pytest.mark.slow
def test_a_live_3dc_cluster_s_metrics_match_the_scheduler_s_stats(no_leftovers):
    tmp = no_leftovers
    stats, folder = tmp / "stats.jsonl", tmp / "targets"
    links = tuple(Link(a, b, 100.0, 100.0) for a, b in (("dc0", "dc1"), ("dc1", "dc2"),
                                                         ("dc0", "dc2")))
    config = ClusterConfig("127.0.0.1", free_port(),
                           tuple(DataCenter(dc, "127.0.0.1", 0, 1) for dc in DCS),
                           heartbeat_s=0.1, policy="fapt", adapt=True, links=links,
                           stats=str(stats), metrics=MetricsConfig(
                               on=True, ports=(0, 0), targets_dir=str(folder)))
    path = tmp / "cluster.toml"
    path.write_text(to_toml(config).replace("[security]\ncurve = true\n", ""))
    argv = [sys.executable, str(REPO / "scripts" / "launch.py"), "--cluster", str(path), "--",
            *worker_cmd("metrics_worker.py", ROUNDS, STEP_S, KEY_ELEMENTS)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, TMPDIR=str(tmp)), start_new_session=True)
    try:
        where = wait_for(lambda: len(targets(folder)) == 4 and targets(folder),
                         "file_sd entry for each of the 4 processes", 60, proc)
        assert set(where) == {"scheduler", *DCS}
        # rounds running, each DC's link estimates logged, a round judged
        sched = wait_for(lambda: running(scrape(where["scheduler"])), "round 6 opened", 60,
                         proc)
        servers = {dc: scrape(where[dc]) for dc in DCS}
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            for p in leftovers(str(tmp)):
                p.kill()
            proc.communicate()
    output = out.decode("utf-8", "replace")
    assert proc.returncode == 0, output[-4000:]
    assert targets(folder) == {}, "the file_sd entries outlived their processes"
    records = [json.loads(line) for line in stats.read_text().splitlines()]

    # links: the estimates are one whole "rates" record the scheduler logged; the planned
    # rates those the policy in force was planned with (declared: no re-plan on equal links)
    estimated = by_link(sched, "netstorm_link_estimated_mbps")
    assert len(estimated) == 6
    logged = [{name: value[0] for name, value in r["rates"].items()}
              for r in records if r["event"] == "rates"]
    assert estimated in logged
    policies = [r for r in records if r["event"] == "policy"]
    version = one(sched, "netstorm_policy_version")
    if version == 1:
        assert by_link(sched, "netstorm_link_planned_mbps") == \
            {f"{a}->{b}": 100.0 for a in DCS for b in DCS if a != b}
    assert one(sched, "netstorm_replans_total") == \
        len([p for p in policies if p["reason"] == "re-planned" and p["version"] <=
             one(sched, "netstorm_policy_version_announced")])

    # rounds: the round opened was logged opening, under the version in force; the last
    # completed round took what the scheduler's trust record says
    opened = int(one(sched, "netstorm_round_opened"))
    (record,) = [r for r in records if r["event"] == "round_open" and r["round"] == opened]
    assert record["version"] == version
    done = int(one(sched, "netstorm_rounds_completed"))
    judged = [r for r in records if r["event"] == "trust" and r["round"] == done and
              "seconds" in r]
    transition = any(p["start_round"] == done for p in policies)
    assert judged or transition, f"round {done} was never judged"
    for r in judged:
        assert abs(r["seconds"] - one(sched, "netstorm_round_seconds")) <= 0.0006
    models = [r["bytes"] for r in records if r["event"] == "model"]
    if models:      # servers that report the model's size: the round against the cut bound
        assert models == [KEY_ELEMENTS * 4]
        topology = Topology("wan", DCS, links).with_rates(
            {tuple(name.split("->")): mbps for name, mbps in estimated.items()})
        bound = cut_lower_bound_s(topology, KEY_ELEMENTS * 4)
        assert one(sched, "netstorm_round_cut_bound_seconds") == pytest.approx(bound)
        assert one(sched, "netstorm_round_bound_ratio") == \
            pytest.approx(one(sched, "netstorm_round_seconds") / bound)
    per_dc = {dict(l)["dc"]: v for l, v in series(sched, "netstorm_dc_round").items()}
    assert set(per_dc) == set(DCS) and max(per_dc.values()) == one(sched, "netstorm_round")

    # every server: bytes on both inbound links, its round, the model's size
    for dc, samples in servers.items():
        inbound = by_link(samples, "netstorm_link_bytes_total")
        assert set(inbound) == {f"{o}->{dc}" for o in DCS if o != dc}, inbound
        assert all(v > 0 for v in inbound.values())
        assert one(samples, "netstorm_round", dc=dc, role="server") >= 1
        assert one(samples, "netstorm_model_bytes") == KEY_ELEMENTS * 4
        assert one(samples, "netstorm_dropped_messages_total", reason="malformed") == 0


def test_a_taken_metrics_port_is_refused_naming_the_field():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(MetricsError, match=rf"\[metrics\] port {port}: is taken on "
                                               rf"127\.0\.0\.1"):
            serve_metrics(MetricsConfig(on=True, ports=(port, port)), _Nothing(), "x",
                          "127.0.0.1", {"role": "test"})


def test_a_range_takes_its_first_free_port_and_the_entry_goes_with_the_endpoint(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        if port == 65535:
            pytest.skip("no port above the taken one")
        config = MetricsConfig(on=True, ports=(port, port + 1), targets_dir=str(tmp_path))
        try:
            endpoint = serve_metrics(config, _Nothing(), "scheduler", "127.0.0.1",
                                     {"role": "scheduler"})
        except MetricsError:
            pytest.skip(f"port {port + 1} is taken too")
    try:
        assert endpoint.port == port + 1
        entry = json.loads((tmp_path / "netstorm-scheduler.json").read_text())
        assert entry == [{"targets": [f"127.0.0.1:{port + 1}"],
                          "labels": {"netstorm_role": "scheduler"}}]
        samples = scrape(f"127.0.0.1:{endpoint.port}")
        assert any(name == "process_cpu_seconds_total" for name, _ in samples)
    finally:
        endpoint.close()
    assert not (tmp_path / "netstorm-scheduler.json").exists()


class _Nothing:
    def collect(self):
        return []


def test_one_metrics_port_for_a_host_running_several_processes_is_refused_at_once():
    """--metrics-port 9400 on one machine: the scheduler and both servers would need it;
    refused before anything starts, naming the host, the processes and the flag."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "launch.py"), "--dcs", "2",
                           "--metrics-port", "9400", "--", "true"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "[metrics] port 9400 holds 1 port(s), but 127.0.0.1 runs 3 processes that serve " \
           "metrics (the scheduler, the server of 'dc0', the server of 'dc1')" in proc.stderr
    assert "(with the command line's --metrics-port)" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("module", [["netstorm.scheduler"], ["netstorm.geoserver", "--dc",
                                                                "dc0"]])
def test_a_process_whose_metrics_port_is_taken_stops_at_once_saying_why(tmp_path, module):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = ClusterConfig("127.0.0.1", free_port(),
                               (DataCenter("dc0", "127.0.0.2", 0, 1),),
                               metrics=MetricsConfig(on=True, ports=(port, port)))
        path = tmp_path / "cluster.toml"
        path.write_text(to_toml(config).replace("curve = true", "curve = false"))
        reason = tmp_path / "reason"
        proc = subprocess.run([sys.executable, "-m", *module, "--cluster", str(path),
                               "--reason-file", str(reason)], capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 2, proc.stderr
    message = f"[metrics] port {port}: is taken on 127.0.0.1"
    assert message in proc.stderr and message in reason.read_text()
    assert "Traceback" not in proc.stderr
