"""Failures that say why (issue 37): whatever stops a process, the launcher's line naming the
failure names the process and the cause - an error outside netstorm's own as ``Type:
message`` (scheduler, server, a worker before it has a store), a worker on the wrong Python,
a script asking for MXNet's stock ``dist_sync`` without --as-dist-sync - and a launch that
places a process on another machine's address is refused before anything starts. Each run is
one DC and ends within seconds of its start (MXNet's import in a worker is the longest)."""
import io
import subprocess
import sys

import pytest

from launching import REPO, free_port, launch
from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.launcher.processes import FAILURE_END
from netstorm.launcher.supervisor import run_cluster
from unit.test_launch import MXNET_EXAMPLE

pytestmark = pytest.mark.slow

# The interpreter the launcher starts the scheduler and the servers with (``run_cluster``'s
# ``python``): it runs ``-m MODULE`` after making the scheduler's or the servers' run fail with
# an error no check of netstorm's names, as a bug or a value no validation caught would.
WRAPPER = """#!{python}
import runpy, sys
at = sys.argv.index("-m")            # after the interpreter's own flags (-P)
module = sys.argv[at + 1]
if module == "netstorm.scheduler" == {target!r}:
    import netstorm.scheduler.service as service
    def run(self):
        raise OverflowError("cannot convert float infinity to integer")
    service.Scheduler.run = run
if module == "netstorm.geoserver" == {target!r}:
    import netstorm.geoserver.server.geoserver as geoserver
    def serve(self):
        raise ZeroDivisionError("division by zero")
    geoserver.GeoServer.serve = serve
sys.argv = [module, *sys.argv[at + 2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
JOIN_AND_WAIT = [sys.executable, "-c",       # a worker that joins, without MXNet's import
                 "import os, time\n"
                 "from netstorm.geoserver.worker.client import WorkerClient, WorkerSettings\n"
                 "client = WorkerClient(WorkerSettings.from_env(os.environ))\n"
                 "time.sleep(60)\n"]


def failure_line(output: str) -> str:
    """The launcher's line naming the failure (the one ending '; stopping the cluster')."""
    lines = [l for l in output.splitlines() if l.startswith("[launch] ") and
             l.endswith(FAILURE_END)]
    assert len(lines) == 1, output[-3000:]
    return lines[0]


@pytest.mark.parametrize("role, command, line", [
    ("netstorm.scheduler", SLEEP, "[launch] scheduler exited with code 1: OverflowError: "
                                  "cannot convert float infinity to integer" + FAILURE_END),
    ("netstorm.geoserver", JOIN_AND_WAIT, "[launch] server dc0 exited with code 1: "
                                          "ZeroDivisionError: division by zero" + FAILURE_END),
], ids=["scheduler", "server"])
def test_an_error_outside_netstorm_s_own_is_named_as_type_and_message(no_leftovers,
                                                                      monkeypatch, role,
                                                                      command, line):
    python = no_leftovers / "python"
    python.write_text(WRAPPER.format(python=sys.executable, target=role))
    python.chmod(0o755)
    monkeypatch.setenv("TMPDIR", str(no_leftovers))     # what no_leftovers looks for
    out = io.StringIO()
    config = pseudo_cluster(1, 1, free_port(), timeout_s=30.0)
    assert run_cluster(config, command, out=out, python=str(python)) == 1, out.getvalue()
    assert failure_line(out.getvalue()) == line, out.getvalue()[-3000:]
    # (that a registered server also tells the scheduler races with the launcher's stop of
    # the scheduler: tests/unit/test_entry_points.py checks it)


@pytest.mark.parametrize("flags, script, reason", [
    ([], "raise OverflowError('cannot convert float infinity to integer')",
     "OverflowError: cannot convert float infinity to integer"),
    (["--as-dist-sync"], "import mxnet as mx; mx.kv.create('dist_async')",
     "KVStoreError: this script asks for MXNet's dist_async, but netstorm (started with "
     "--as-dist-sync) runs synchronous training only"),
], ids=["any-error", "dist_async"])
def test_a_worker_that_fails_before_creating_the_store_says_why(no_leftovers, flags, script,
                                                                 reason):
    run = launch(["--dcs", 1, *flags], [sys.executable, "-c", script], no_leftovers)
    line = failure_line(run.output)
    assert run.code == 1 and line.startswith(f"[launch] worker dc0/0 exited with code 1: "
                                             f"{reason}"), run.output[-3000:]


def test_mxnet_s_train_mnist_without_as_dist_sync_is_told_to_add_it(no_leftovers):
    """The issue's case: it died in ps-lite's C++ (``Check notnull: Environment::Get()->
    find("DMLC_NUM_WORKER")``) with no reason in the launcher's line."""
    run = launch(["--dcs", 1], [sys.executable, str(MXNET_EXAMPLE / "train_mnist.py"),
                                "--kv-store", "dist_sync"], no_leftovers, cwd=no_leftovers)
    assert run.code == 1 and failure_line(run.output) == (
        "[launch] worker dc0/0 exited with code 1: KVStoreError: this script asks for MXNet's "
        "'dist_sync' kvstore, which needs MXNet's own parameter servers: add --as-dist-sync "
        "to netstorm-launch, so that 'dist_sync' creates netstorm's store (or name the store "
        "'netstorm' in the script)" + FAILURE_END), run.output[-3000:]
    assert "DMLC_NUM_WORKER" not in run.output


def test_a_worker_on_a_python_without_netstorm_stops_at_once_naming_both(no_leftovers):
    """The launcher run from an inactive virtualenv: CMD's ``python`` is another one."""
    other = no_leftovers / "other"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True,
                   timeout=60)
    python = other / "bin" / "python"
    run = launch(["--dcs", 1], [str(python), "-c", "print('trained alone')"], no_leftovers,
                 env={"PYTHONNOUSERSITE": "1"}, cwd=no_leftovers)
    assert run.code == 1 and "trained alone" not in run.output, run.output[-3000:]
    assert failure_line(run.output).startswith(
        f"[launch] worker dc0/0 exited with code 1: this worker's Python ({python}) cannot "
        f"import netstorm (No module named 'netstorm'), but the launcher runs on "
        f"{sys.executable}: start CMD with that Python ({sys.executable} ...), or "), \
        run.output[-3000:]
    # started by a wrapper script (bash forks it: not its last command) that then exits 0:
    # a warning, and the reason in the line
    run = launch(["--dcs", 1], ["bash", "-c", f"{python} -c pass; exit 0"], no_leftovers,
                 env={"PYTHONNOUSERSITE": "1"}, cwd=no_leftovers)
    assert run.code == 1 and "warning: this worker's Python" in run.output, run.output[-3000:]
    assert failure_line(run.output).startswith(
        f"[launch] worker dc0/0 exited with code 0 without joining the cluster: it never "
        f"created the 'netstorm' kvstore; it said: this worker's Python ({python}) cannot "
        f"import netstorm"), run.output[-3000:]


def test_a_whole_cluster_launch_refuses_a_process_on_another_machine_up_front(no_leftovers):
    cluster = no_leftovers / "cluster.toml"
    cluster.write_text('[scheduler]\nhost = "127.0.0.1"\nport = 9\n'
                       '[[dc]]\nname = "eu"\nhost = "127.0.0.1"\nserver_port = 0\n'
                       'workers = 1\nworker_hosts = ["198.51.100.7"]\n')   # TEST-NET-2
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "launch.py"), "--cluster",
                           str(cluster), "--", *SLEEP], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"launch: {cluster} places worker eu/0 on 198.51.100.7 (DC eu's worker_hosts), not an "
        f"address of this machine; without --host, --dc or --ssh the launcher starts the "
        f"whole cluster on this machine: start each host's share there (--host ADDRESS), or "
        f"every host from here with --ssh (docs/launch.md)")
