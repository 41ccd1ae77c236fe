"""Take docs/img/status-page.png: the status page of a live 3-DC cluster while it trains
(loopback, a declared WAN, fapt trees), in headless Chromium.

    .venv/bin/python tests/status_screenshot.py docs/img/status-page.png

The cluster runs tests/workers/status_worker.py for ROUNDS rounds; the page is shot once
SHOT_AT rounds are done, then the workers are let go and the launcher must end with 0."""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from launching import REPO, free_port, leftovers, worker_cmd     # tests/: this script's folder
from netstorm.geoserver.config.cluster import Link, pseudo_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.status import StatusConfig

ROUNDS, SHOT_AT = 600, 250
LINKS = (Link("dc0", "dc1", 200.0, 200.0), Link("dc1", "dc2", 100.0, 100.0),
         Link("dc0", "dc2", 50.0, 50.0))


def main(out: Path) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="status-shot-"))
    port = free_port()
    config = replace(pseudo_cluster(3, 1, free_port(), policy="fapt", links=LINKS),
                     status=StatusConfig(port=port, total_steps=ROUNDS, samples_per_step=96))
    (tmp / "cluster.toml").write_text(to_toml(config))
    with open(tmp / "cluster.log", "w") as log:
        launcher = subprocess.Popen(
            [sys.executable, str(REPO / "scripts" / "launch.py"), "--cluster",
             str(tmp / "cluster.toml"), "--", *worker_cmd("status_worker.py", tmp, ROUNDS)],
            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, TMPDIR=str(tmp)),
            start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "status.json", timeout=5) as answer:
                    if json.loads(answer.read())["rounds"]["latest"] >= SHOT_AT:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        subprocess.run(["chromium", "--headless", "--disable-gpu", "--no-sandbox",
                        "--disable-dev-shm-usage", "--no-first-run",
                        f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=5000",
                        "--hide-scrollbars", "--window-size=1280,1000", f"--screenshot={out}",
                        url], check=True, timeout=90)
    finally:
        (tmp / "go").write_text("go")
        code = launcher.wait(timeout=120)
        for proc in leftovers(str(tmp)):
            proc.kill()
    print(f"{out}; the launcher exited with {code} (its output: {tmp / 'cluster.log'})")
    return code


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve()))
