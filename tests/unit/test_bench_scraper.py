"""netstorm.bench.scraper and the netstorm-fapt-observed system's cluster file: target
selection from file_sd entries, the scrape loop on a fake clock and fetch, the counts in the
bench result. The live run is tests/cluster/test_bench.py's."""

import json

from netstorm.geoserver.config.cluster import load_cluster
from netstorm.geoserver.config.cluster_toml import to_toml

from netstorm.bench import systems
from netstorm.bench.cpu import ROLES
from netstorm.bench.scraper import (
    Scraper,
    Scrapers,
    apply_scrapes,
    select_targets,
    summarize,
)
from netstorm.bench.systems import OBSERVED, SYSTEMS, RunContext, observed_config
from netstorm.wan import load_topology


def _entry(folder, name, target, **labels):
    folder.mkdir(exist_ok=True)
    (folder / f"netstorm-{name}.json").write_text(json.dumps(
        [{"targets": [target], "labels": {f"netstorm_{k}": v for k, v in labels.items()}}]))


def _targets(tmp_path):
    folder = tmp_path / "targets"
    _entry(folder, "scheduler", "127.0.0.1:4000", role="scheduler")
    _entry(folder, "server-eu", "127.0.0.1:4001", role="server", dc="eu")
    _entry(folder, "server-us", "127.0.0.1:4002", role="server", dc="us")
    (folder / ".netstorm-server-ap.123.tmp").write_text("[{half")    # being written
    (folder / "netstorm-broken.json").write_text("not json")          # skipped
    return folder


def test_a_scraper_takes_its_dcs_server_and_the_scheduler_only_where_it_runs(tmp_path):
    folder = _targets(tmp_path)
    assert select_targets(folder, "eu", scheduler=True) == {
        "scheduler": "http://127.0.0.1:4000/metrics",
        "server-eu": "http://127.0.0.1:4001/metrics"}
    assert select_targets(folder, "us", scheduler=False) == {
        "server-us": "http://127.0.0.1:4002/metrics"}
    assert select_targets(folder, "ap", scheduler=False) == {}
    assert select_targets(tmp_path / "missing", "eu", scheduler=True) == {}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_loop_scrapes_status_every_2s_and_metrics_every_5s_counting_failures(tmp_path):
    folder = tmp_path / "targets"
    clock, asked = Clock(), []

    def fetch(url):
        asked.append((clock.now, url))
        return "4001" not in url        # the server's endpoint fails

    scraper = Scraper(folder, "eu", scheduler=True, status_url="http://s/status.json",
                      fetch=fetch, clock=clock)
    assert scraper.tick() == 1.0 and scraper.counts == {"status": {"ok": 1, "failed": 0}}
    _targets(tmp_path)                  # the endpoints appear: scraped at once
    for clock.now in (1.0, 2.0, 4.0, 6.0):
        scraper.tick()
    assert scraper.counts == {"status": {"ok": 4, "failed": 0},       # 0, 2, 4, 6
                              "scheduler": {"ok": 2, "failed": 0},    # 1, 6
                              "server-eu": {"ok": 0, "failed": 2}}
    assert sum("4002" in url for _, url in asked) == 0      # another DC's server
    assert scraper.result() == {"dc": "eu", "scrapes": scraper.counts}


def test_run_sleeps_in_the_event_between_ticks_and_stops_when_set(tmp_path):
    waits = []

    class Stop:
        def is_set(self):
            return len(waits) >= 3

        def wait(self, seconds):
            waits.append(seconds)
            return len(waits) >= 3

    Scraper(tmp_path, "eu", status_url="http://s/status.json",
            fetch=lambda url: True, clock=Clock()).run(Stop())
    assert waits == [1.0, 1.0, 1.0]     # the clock stands still: new targets looked for


def test_the_counts_reach_the_result_and_none_fails_the_run(tmp_path):
    (tmp_path / "scrapes-eu.json").write_text(json.dumps(
        {"dc": "eu", "scrapes": {"status": {"ok": 4, "failed": 1},
                                 "server-eu": {"ok": 2, "failed": 0}}}))
    (tmp_path / "scrapes-us.json").write_text(json.dumps(
        {"dc": "us", "scrapes": {"server-us": {"ok": 0, "failed": 3}}}))
    assert list(summarize(tmp_path)) == ["server-eu", "server-us", "status"]
    r = apply_scrapes({"correct": True}, tmp_path)
    assert r["correct"] and r["scrapes_ok"] == 6 and r["scrapes"]["server-us"]["failed"] == 3
    empty = tmp_path / "empty"
    empty.mkdir()
    r = apply_scrapes({"correct": True}, empty)
    assert not r["correct"] and r["scrapes_ok"] == 0 and "no scrape succeeded" in r["error"]


class Wan:
    def __init__(self, dcs):
        self.address = {dc: f"10.99.{i}.1" for i, dc in enumerate(dcs)}

    def dc_address(self, dc):
        return self.address[dc]

    def exec_prefix(self, dc):
        return ["ip", "netns", "exec", f"ns-{dc}"]


def test_the_observed_system_is_fapt_with_metrics_and_status_on(tmp_path, monkeypatch):
    ports = iter(range(41000, 41010))
    monkeypatch.setattr(systems, "free_port", lambda: next(ports))
    topology = load_topology("paper9")
    ctx = RunContext(Wan(topology.dcs), topology, 1, [], tmp_path, None)
    config = observed_config(ctx, tmp_path)
    path = tmp_path / "cluster.toml"
    path.write_text(to_toml(config))
    read = load_cluster(path)           # what the processes read
    assert read.metrics.on and read.metrics.any_port
    assert read.metrics.targets_dir == str((tmp_path / "targets").resolve())
    assert read.status.on and read.status.port == 41001 and read.status.host == "127.0.0.1"
    plain = systems.cluster_config(ctx, tmp_path, "fapt")
    assert (read.policy, read.links, read.hub) == (plain.policy, plain.links, plain.hub)
    assert not plain.metrics.on and not plain.status.on
    assert "netstorm-fapt-observed" in SYSTEMS and OBSERVED == ("netstorm-fapt-observed",)
    assert "scraper" in ROLES


def test_one_scraper_per_dc_in_its_namespace_the_schedulers_with_the_status_page(tmp_path):
    scrapers = Scrapers(Wan(["eu", "us"]), ["eu", "us"], "us", tmp_path / "t", tmp_path,
                        "http://127.0.0.1:8080/status.json")
    eu, us = scrapers.command("eu"), scrapers.command("us")
    assert eu[:4] == ["ip", "netns", "exec", "ns-eu"] and "--scheduler" not in eu
    assert eu[5:8] == ["-P", "-m", "netstorm.bench.scraper"]
    assert eu[eu.index("--out") + 1] == str(tmp_path / "scrapes-eu.json")
    assert us[-3:] == ["--scheduler", "--status", "http://127.0.0.1:8080/status.json"]
