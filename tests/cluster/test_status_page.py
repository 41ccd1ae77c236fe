"""The live status of a running 3-DC cluster (scheduler/status.py, status_server.py, the page
in scheduler/status_page/, netstorm-status): /status.json against the scheduler's state (the
cluster file, its stats log, the workers' rounds), netstorm-status against /status.json, the
page in headless Chromium against /status.json, and the summary line on the launcher's
console. One cluster serves every test of the module: it trains, then holds still (its status
steady: no adapt, so no probe moves a rate) while the tests look, then finishes."""
import json
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from launching import REPO, free_port, launch, leftovers, worker_cmd
from netstorm.geoserver.config.cluster import Link, pseudo_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.status import StatusConfig
from netstorm.scheduler.status import SUMMARY_S, tree_edges
from netstorm.geoserver.policy.tree import Tree

pytestmark = pytest.mark.slow

ROUNDS = 25
DCS = ("dc0", "dc1", "dc2")
LINKS = (Link("dc0", "dc1", 200.0, 200.0), Link("dc1", "dc2", 100.0, 100.0),
         Link("dc0", "dc2", 50.0, 50.0))
SCREENSHOT = REPO / "docs" / "img" / "status-page.png"


class HeldCluster:
    """3 DCs x 1 worker (tests/workers/status_worker.py) through the launcher, in a thread,
    with [status] on; it trains ROUNDS rounds and holds still until :meth:`finish`."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.stats = tmp / "stats.jsonl"
        config = pseudo_cluster(3, 1, free_port(), policy="fapt", links=LINKS,
                                stats=str(self.stats))
        self.config = replace(config, status=StatusConfig(port=self.port,
                                                          total_steps=2 * ROUNDS))
        self.file = tmp / "cluster.toml"
        self.file.write_text(to_toml(self.config))
        self.run = None
        self.thread = threading.Thread(target=self._launch, daemon=True)
        self.thread.start()

    def _launch(self):
        try:
            self.run = launch(["--cluster", self.file, "--timeout", 30],
                              worker_cmd("status_worker.py", self.tmp, ROUNDS), self.tmp,
                              timeout=120)
        except BaseException as exc:        # pytest.fail on a hang: raised by finish()
            self.run = exc

    def status(self) -> dict:
        with urllib.request.urlopen(self.url + "status.json", timeout=10) as answer:
            return json.loads(answer.read())

    def held(self, timeout: float = 90.0) -> dict:
        """Once every worker finished its rounds and the status stopped changing (and the
        scheduler lived long enough to log a summary line): the steady status."""
        deadline = time.monotonic() + timeout
        before = None
        while time.monotonic() < deadline:
            if not self.thread.is_alive():
                pytest.fail(f"the cluster ended early:\n{self.finish().output[-4000:]}")
            paused = all((self.tmp / f"paused-{rank}").exists() for rank in range(3))
            now = self.status() if paused else None
            if now is not None and steady(now) == steady(before) and \
                    now["rounds"]["latest"] == ROUNDS and now["uptime_s"] > SUMMARY_S + 1:
                return now
            before = now
            time.sleep(1.0)
        pytest.fail(f"the cluster's status never held still; last: {before}")

    def finish(self):
        (self.tmp / "go").write_text("go")
        self.thread.join(130)
        if isinstance(self.run, BaseException):
            raise self.run
        return self.run


def steady(snap) -> dict | None:
    """What must not change while the cluster holds still (not times, ages, rates of
    rounds over a sliding window or the DCs' mean lag, which fades)."""
    if snap is None:
        return None
    return {"dcs": [(d["name"], d["round"], d["workers"]) for d in snap["dcs"]],
            "policy": snap["policy"], "rounds": snap["rounds"]["latest"],
            "links": [{k: v for k, v in l.items() if k != "measured_age_s"}
                      for l in snap["links"]]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("status")
    held = HeldCluster(tmp)
    try:
        held.held()
        yield held
    finally:
        run = held.finish()
        alive = leftovers(str(tmp))
        for p in alive:
            p.kill()
        assert not alive, f"processes left running: {[p.info['cmdline'] for p in alive]}"
        assert run.code == 0, run.output[-4000:]


def test_status_json_matches_the_cluster_file_the_stats_log_and_the_workers(cluster):
    snap = cluster.status()
    assert [d["name"] for d in snap["dcs"]] == list(DCS)
    assert [(d["workers"], d["round"]) for d in snap["dcs"]] == [(1, ROUNDS)] * 3
    assert snap["state"] == "training" and snap["rounds"]["completed"] == ROUNDS - 1
    # the trees in force are the policy the scheduler logged (fapt on the declared WAN)
    logged = [json.loads(l) for l in cluster.stats.read_text().splitlines()]
    policy = [r for r in logged if r.get("event") == "policy"][-1]
    assert snap["policy"]["version"] == policy["version"]
    trees = [Tree(t["root"], t["parent"], t.get("down")) for t in policy["trees"]]
    assert [(t["root"], t["share"], t["edges"]) for t in snap["policy"]["trees"]] == \
        [(tree.root, logged_tree["share"], [list(e) for e in tree_edges(tree)])
         for tree, logged_tree in zip(trees, policy["trees"])]
    # every declared direction with its declared rate and the model's share crossing it as
    # the logged trees say; a measured rate where the receiving server reported one (only a
    # backlogged link is timed: on loopback, which ones is up to the moment)
    planned = {(l.a, l.b): l.mbps_ab for l in LINKS} | {(l.b, l.a): l.mbps_ba for l in LINKS}
    assert {(l["src"], l["dst"]): l["planned_mbps"] for l in snap["links"]} == planned
    crossing = {}
    for tree, logged_tree in zip(trees, policy["trees"]):
        for a, b, _ in tree_edges(tree):
            crossing[(a, b)] = crossing.get((a, b), 0.0) + logged_tree["share"]
    assert {(l["src"], l["dst"]): l["share"] for l in snap["links"] if l["share"]} == \
        pytest.approx(crossing, abs=1e-4)
    for link in snap["links"]:
        assert (link["measured_mbps"] is None) == (link["measured_age_s"] is None)
        assert link["measured_mbps"] is None or link["measured_mbps"] > 0
        assert not link["stalled"]
    # the progress the workers declared: 2 x ROUNDS steps, one per round under fsa
    progress = snap["progress"]
    assert (progress["steps"], progress["total_steps"]) == (ROUNDS - 1, 2 * ROUNDS)
    # the first policy; a link reported stalled for a moment on a loaded host is an event too
    kinds = [e["kind"] for e in snap["events"]]
    assert kinds[0] == "policy" and set(kinds) <= {"policy", "stall"}, snap["events"]
    assert snap["workers"] == {"total": 3, "finished": 0}


def test_netstorm_status_prints_the_clusters_status_as_tables(cluster):
    snap = cluster.status()
    done = subprocess.run([sys.executable, "-m", "netstorm.launcher.status_cli", "--cluster",
                           str(cluster.file)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"netstorm cluster at {cluster.url}status.json: training")
    for dc in snap["dcs"]:
        assert [dc["name"], str(ROUNDS), "1"] in [l.split()[:3] for l in lines]
    for link in snap["links"]:
        row = next(l.split() for l in lines if l.startswith(f"{link['src']} -> {link['dst']} "))
        assert float(row[3]) == pytest.approx(link["measured_mbps"], rel=1e-3) \
            if link["measured_mbps"] is not None else row[3] == "-"
        assert float(row[4]) == pytest.approx(link["planned_mbps"], rel=1e-3)
    assert f"TREES: policy v{snap['policy']['version']} in force from round " \
           f"{snap['policy']['start_round']}" in lines
    watched = subprocess.run([sys.executable, "-m", "netstorm.launcher.status_cli",
                              "--cluster", str(cluster.file), "--watch", "0.2", "--count", "2"],
                             capture_output=True, text=True, timeout=60)
    assert watched.returncode == 0 and watched.stdout.count("netstorm cluster at") == 2


class _Dom(HTMLParser):
    """The elements of a dumped page that carry data- attributes, by class."""

    def __init__(self):
        super().__init__()
        self.found = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "main":
            self.found["main"] = attrs
        for name in (attrs.get("class") or "").split():
            self.found.setdefault(name, []).append(attrs)


def chromium(*args, timeout=90) -> str:
    done = subprocess.run(["chromium", "--headless", "--disable-gpu", "--no-sandbox",
                           "--disable-dev-shm-usage", "--no-first-run", *args],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _number(text):
    return None if text is None else float(text)


@pytest.mark.system_package("chromium")
def test_the_page_in_chromium_shows_the_dcs_trees_and_rates_of_status_json(cluster, tmp_path):
    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = _Dom()
    dom.feed(chromium(*profile, "--virtual-time-budget=5000", "--dump-dom", cluster.url))
    snap = cluster.status()
    assert dom.found["main"]["data-state"] == "training"
    assert dom.found["main"]["data-latest-round"] == str(ROUNDS)
    assert dom.found["main"]["data-policy-version"] == str(snap["policy"]["version"])
    assert [(d["data-dc"], d["data-round"]) for d in dom.found["dc"]] == \
        [(d["name"], str(d["round"])) for d in snap["dcs"]]
    # an arrow for every direction the trees use, with its share and both rates
    arrows = {(e["data-src"], e["data-dst"]): (float(e["data-share"]),
                                               _number(e.get("data-measured-mbps")),
                                               _number(e.get("data-planned-mbps")))
              for e in dom.found["edge"]}
    assert arrows == {(l["src"], l["dst"]): (l["share"], l["measured_mbps"], l["planned_mbps"])
                      for l in snap["links"] if l["share"] > 0}
    rows = {(r["data-src"], r["data-dst"]): (_number(r.get("data-measured-mbps")),
                                             _number(r.get("data-planned-mbps")))
            for r in dom.found["link"]}
    assert rows == {(l["src"], l["dst"]): (l["measured_mbps"], l["planned_mbps"])
                    for l in snap["links"]}
    shot = tmp_path / "status-page.png"
    chromium(*profile, "--virtual-time-budget=5000", "--hide-scrollbars",
             "--window-size=1280,1000", f"--screenshot={shot}", cluster.url)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_the_summary_line_is_on_the_launchers_console(cluster):
    """Checked once the cluster finished (the module's last test): the scheduler logged
    the one-line summary while it trained and held still."""
    cluster.finish()
    lines = [l for l in cluster.run.output.splitlines()
             if l.startswith("[scheduler") and "status: round" in l]
    assert lines, cluster.run.output[-3000:]
    assert "rounds/s" in lines[0] and ("slowest DC" in lines[0] or "DCs in step" in lines[0])
    assert "status page at http://127.0.0.1:" in cluster.run.output
