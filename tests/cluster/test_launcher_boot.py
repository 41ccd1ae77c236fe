"""netstorm/launcher/boot/sitecustomize.py: what every worker of the launcher runs first."""
import os
import subprocess
import sys

from netstorm.launcher.supervisor import BOOT_DIR

CHECK = ("import mxnet as mx\n"
         "from mxnet.kvstore.base import KVStoreBase as B\n"
         "print(sorted(k for k in B.kv_registry if k.startswith(('dist', 'netstorm'))))\n")


def _python(code, tmp_path, **env):
    extra = tmp_path / "other"
    extra.mkdir(exist_ok=True)
    (extra / "sitecustomize.py").write_text("print('the hidden sitecustomize ran')\n")
    full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    full.update(PYTHONPATH=f"{BOOT_DIR}{os.pathsep}{extra}", **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full, timeout=120, cwd=tmp_path)


def test_workers_know_netstorm_without_importing_it_and_the_hidden_one_still_runs(tmp_path):
    proc = _python(CHECK, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["the hidden sitecustomize ran", "['netstorm']"]


def test_as_dist_sync_maps_mxnet_s_sync_names_and_refuses_async(tmp_path):
    proc = _python(CHECK + "mx.kv.create('dist_async')", tmp_path, NETSTORM_AS_DIST_SYNC="1")
    assert "['dist', 'dist_async', 'dist_async_device', 'dist_device_async', " \
           "'dist_device_sync', 'dist_sync', 'dist_sync_device', 'netstorm']" in proc.stdout
    assert proc.returncode != 0 and "runs synchronous training only" in proc.stderr


def test_a_python_without_netstorm_gets_a_warning_not_a_crash(tmp_path):
    env = {"PYTHONNOUSERSITE": "1"}
    proc = subprocess.run([sys.executable, "-S", "-c", "import sitecustomize; print('ran')"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(BOOT_DIR)})
    assert proc.returncode == 0 and proc.stdout.strip() == "ran"
    assert "cannot import netstorm" in proc.stderr and "virtualenv" in proc.stderr
