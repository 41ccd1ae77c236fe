"""An operator's scraper, for the benchmark's ``netstorm-fapt-observed`` system: what the
metrics and the status page cost when someone actually reads them.

One scraper runs in each DC's network namespace (under the emulated WAN every process's
endpoint is on its own namespace's loopback, docs/operations.md "Under --wan")::

    python -P -m netstorm.bench.scraper --targets DIR --dc NAME --out FILE \\
        [--scheduler] [--status URL]

It reads the Prometheus file_sd entries in ``DIR`` (``netstorm-*.json``, written by each
process that serves ``/metrics``) and keeps those of its DC: the server whose
``netstorm_dc`` label is ``NAME``, and with ``--scheduler`` (the namespace the scheduler runs
in) the scheduler's. It GETs each ``/metrics`` every 5 s (a target seen for the first time
at once: the folder is looked at every second) and ``URL`` (the status page's
``/status.json``) every 2 s, as a browser on the page does, counting successes and failures per endpoint; on SIGTERM it writes the counts to
``FILE`` as JSON and exits. Light on purpose: urllib, one thread, asleep in
``Event.wait`` between scrapes (its CPU counts against the observed system).

:class:`Scrapers` starts and stops one per DC around a run; :func:`apply_scrapes` adds
their counts to the system's bench result (and fails it when nothing was scraped).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

__all__ = ["METRICS_PERIOD_S", "STATUS_PERIOD_S", "Scraper", "Scrapers", "apply_scrapes",
           "http_get", "main", "select_targets", "summarize"]

STATUS_PERIOD_S = 2.0       # what the status page's script polls
METRICS_PERIOD_S = 5.0      # a brisk Prometheus scrape_interval
DISCOVER_S = 1.0            # how often new file_sd entries are looked for (a process up)
TIMEOUT_S = 2.0
RESULT_GLOB = "scrapes-*.json"


def select_targets(folder: Path, dc: str, scheduler: bool) -> dict:
    """Endpoint name (``server-DC``, ``scheduler``) -> its ``/metrics`` URL, from the
    file_sd entries in ``folder`` of ``dc``'s server and, if ``scheduler``, the
    scheduler's. Entries are replaced atomically (their temporary files start with a dot)
    and removed when a process exits: one gone or unreadable is skipped. O(files)."""
    found = {}
    for path in sorted(Path(folder).glob("netstorm-*.json")):
        try:
            groups = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for group in groups if isinstance(groups, list) else ():
            labels = group.get("labels", {}) if isinstance(group, dict) else {}
            role = labels.get("netstorm_role")
            if role == "server" and labels.get("netstorm_dc") == dc:
                name = f"server-{dc}"
            elif role == "scheduler" and scheduler:
                name = "scheduler"
            else:
                continue
            for target in group.get("targets", ())[:1]:
                found[name] = f"http://{target}/metrics"
    return found


def http_get(url: str, timeout: float = TIMEOUT_S) -> bool:
    """Whether ``url`` answered 200 with its whole body within ``timeout``."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            reply.read()
            return reply.status == 200
    except (OSError, ValueError):       # URLError, refused, reset, timeout, bad reply
        return False


class Scraper:
    """The scrapes of one DC's namespace (see the module doc). ``fetch(url) -> bool`` and
    ``clock`` are injectable for tests; ``counts``: endpoint -> ``{"ok", "failed"}``."""

    def __init__(self, targets_dir: Path, dc: str, scheduler: bool = False,
                 status_url: str | None = None, fetch=http_get, clock=time.monotonic,
                 status_period_s: float = STATUS_PERIOD_S,
                 metrics_period_s: float = METRICS_PERIOD_S):
        self.targets_dir, self.dc, self.scheduler = Path(targets_dir), dc, scheduler
        self.status_url, self.fetch, self.clock = status_url, fetch, clock
        self.periods = {"status": status_period_s, "metrics": metrics_period_s}
        self.counts: dict = {}
        self._last: dict = {}           # endpoint -> when it was last scraped

    def _due(self, now: float) -> dict:
        """Endpoint -> (URL, period) of everything to scrape now or later."""
        due = {name: (url, self.periods["metrics"]) for name, url in
               select_targets(self.targets_dir, self.dc, self.scheduler).items()}
        if self.status_url:
            due["status"] = (self.status_url, self.periods["status"])
        return due

    def tick(self) -> float:
        """Scrape every endpoint whose period has passed (a new one at once); the seconds
        until the next is due, at most :data:`DISCOVER_S` (new targets are looked for
        then: a short run's processes are scraped too)."""
        now = self.clock()
        wait = DISCOVER_S
        for name, (url, period) in self._due(now).items():
            last = self._last.get(name)
            if last is None or now - last >= period:
                ok = self.fetch(url)
                count = self.counts.setdefault(name, {"ok": 0, "failed": 0})
                count["ok" if ok else "failed"] += 1
                self._last[name] = last = now
            wait = min(wait, last + period - now)
        return max(wait, 0.05)

    def run(self, stop: threading.Event) -> None:
        """Scrape until ``stop`` is set, asleep in between."""
        while not stop.is_set():
            if stop.wait(self.tick()):
                break

    def result(self) -> dict:
        return {"dc": self.dc, "scrapes": self.counts}


def write_json(path: Path, value) -> None:
    """``value`` as ``path``, replaced atomically."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)


def main(argv=None) -> int:
    """The scraper's entry point (module doc); exits 0 once stopped by SIGTERM/SIGINT."""
    p = argparse.ArgumentParser(prog="python -m netstorm.bench.scraper",
                                description="Scrape one DC's netstorm endpoints until "
                                            "stopped; write the counts as JSON.")
    p.add_argument("--targets", required=True, help="the [metrics] targets_dir")
    p.add_argument("--dc", required=True, help="this namespace's DC")
    p.add_argument("--out", required=True, help="the JSON file of the counts")
    p.add_argument("--scheduler", action="store_true", help="the scheduler runs here")
    p.add_argument("--status", help="the status page's /status.json URL")
    args = p.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    scraper = Scraper(Path(args.targets), args.dc, args.scheduler, args.status)
    scraper.run(stop)
    write_json(Path(args.out), scraper.result())
    return 0


class Scrapers:
    """One scraper per DC of ``dcs`` in its namespace (``wan.exec_prefix``) while the
    ``with`` block runs; ``scheduler_dc`` is the one with ``--scheduler`` and the status
    page's ``status_url``. Counts go to ``out/scrapes-DC.json``, each scraper's output to
    ``out/scraper-DC.log``."""

    def __init__(self, wan, dcs, scheduler_dc: str, targets_dir: Path, out: Path,
                 status_url: str | None):
        self.wan, self.dcs, self.scheduler_dc = wan, list(dcs), scheduler_dc
        self.targets_dir, self.out, self.status_url = Path(targets_dir), Path(out), status_url
        self.procs: list = []

    def command(self, dc: str) -> list:
        argv = [sys.executable, "-P", "-m", "netstorm.bench.scraper",
                "--targets", str(self.targets_dir), "--dc", dc,
                "--out", str(self.out / f"scrapes-{dc}.json")]
        if dc == self.scheduler_dc:
            argv.append("--scheduler")
            if self.status_url:
                argv += ["--status", self.status_url]
        return list(self.wan.exec_prefix(dc)) + argv

    def __enter__(self):
        try:
            for dc in self.dcs:
                with open(self.out / f"scraper-{dc}.log", "w") as log:
                    self.procs.append(subprocess.Popen(self.command(dc), stdout=log,
                                                       stderr=subprocess.STDOUT))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


def summarize(out: Path) -> dict:
    """The scrapers' counts in ``out`` merged: endpoint -> ``{"ok", "failed"}``."""
    merged = {}
    for path in sorted(Path(out).glob(RESULT_GLOB)):
        try:
            merged.update(json.loads(path.read_text()).get("scrapes", {}))
        except (OSError, ValueError, AttributeError):
            continue
    return dict(sorted(merged.items()))


def apply_scrapes(result: dict, out: Path) -> dict:
    """Add ``scrapes`` (per endpoint) and ``scrapes_ok`` (their sum) to a bench
    ``result``; a run where no scrape succeeded is not ``correct`` (nothing was
    observed, so it measured nothing)."""
    scrapes = summarize(out)
    result["scrapes"] = scrapes
    result["scrapes_ok"] = sum(c.get("ok", 0) for c in scrapes.values())
    if not result["scrapes_ok"]:
        result["correct"] = False
        result.setdefault("error", f"no scrape succeeded (see {out}/scraper-*.log)")
    return result


if __name__ == "__main__":
    sys.exit(main())
