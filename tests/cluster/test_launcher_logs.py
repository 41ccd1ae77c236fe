"""launcher logs, live: --log-dir writes one file per process holding that process's console
lines, and the level reaches every process (the scheduler and the server by flag, the worker
by its boot): --log-level debug shows a worker's debug lines, --quiet drops every info line.
One DC, one worker that joins without importing MXNet: a few seconds per run. The flags and
the files' rules are in tests/unit/test_launcher_logs.py."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launching import REPO, launch

pytestmark = pytest.mark.slow

WORKER = [sys.executable, "-c",       # joins, logs at each level and prints, then leaves
          "import logging, os\n"
          "from netstorm.geoserver.worker.client import WorkerClient, WorkerSettings\n"
          "log = logging.getLogger('netstorm.test')\n"
          "log.debug('a worker debug line')\n"
          "log.info('a worker info line')\n"
          "log.warning('a worker warning line')\n"
          "print('a worker printed line', flush=True)\n"
          "WorkerClient(WorkerSettings.from_env(os.environ)).close()\n"]
PROCESSES = {"launcher.log": "launch", "scheduler.log": "scheduler",
             "server-dc0.log": "server dc0", "worker-dc0-0.log": "worker dc0/0"}
LOGGED = re.compile(r"^\[[^\]]+\] \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR) ")


def levels(lines: list) -> set:
    return {m.group(1) for m in map(LOGGED.match, lines) if m}


def test_log_dir_holds_each_process_s_console_lines_at_the_level_asked(no_leftovers):
    folder = no_leftovers / "logs"
    run = launch(["--dcs", 1, "--log-level", "debug", "--log-dir", folder], WORKER,
                 no_leftovers)
    assert run.code == 0, run.output[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == sorted(PROCESSES), run.output[-3000:]
    console = run.output.splitlines()
    for name, prefix in PROCESSES.items():
        lines = (folder / name).read_text().splitlines()
        assert lines and lines == [l for l in console if l.startswith(f"[{prefix}] ")], name
    assert sorted(sum(((folder / n).read_text().splitlines() for n in PROCESSES), [])) == \
        sorted(console)                                   # every console line, once
    worker = (folder / "worker-dc0-0.log").read_text()
    for said in ("DEBUG netstorm.test: a worker debug line",
                 "INFO netstorm.test: a worker info line",
                 "WARNING netstorm.test: a worker warning line",
                 "[worker dc0/0] a worker printed line"):
        assert said in worker, worker
    assert "INFO netstorm.server: server of dc0 is node" in \
        (folder / "server-dc0.log").read_text()
    assert levels((folder / "scheduler.log").read_text().splitlines()) >= {"INFO"}
    assert (folder / "launcher.log").read_text().startswith("[launch] ok: 1 DC(s)")


def test_quiet_drops_every_process_s_info_lines_and_keeps_warnings(no_leftovers):
    run = launch(["--dcs", 1, "--quiet"], WORKER, no_leftovers)
    assert run.code == 0, run.output[-3000:]
    lines = run.output.splitlines()
    assert levels(lines) == {"WARNING"}, run.output[-3000:]    # the worker's, nothing below
    assert "[worker dc0/0] a worker printed line" in lines      # the script's own output
    assert not [l for l in lines if l.startswith("[launch] ")], run.output[-3000:]


def test_the_installed_launcher_prints_setup_cfg_s_version():
    import configparser
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    launcher = Path(sys.executable).parent / "netstorm-launch"
    done = subprocess.run([str(launcher), "--version"], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == \
        (0, f"netstorm-launch {parser['metadata']['version']}\n"), done.stderr
