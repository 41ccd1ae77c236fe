"""netstorm/launcher/boot/sitecustomize.py's parts, loaded under another name (so that its
boot does not run): the reason a worker leaves before it has a store, the wrong-Python
verdict, and who counts as the launcher's own worker. Its live behaviour is in
tests/cluster/test_launcher_boot.py and test_launch_reasons.py."""
import importlib.util
import os
import sys

import pytest

from netstorm.geoserver.config import exit_reasons
from netstorm.geoserver.config.exit_reasons import read_reason, write_reason
from netstorm.launcher.supervisor import BOOT_DIR


@pytest.fixture(scope="module")
def boot():
    spec = importlib.util.spec_from_file_location("boot_under_test",
                                                  BOOT_DIR / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_boot_s_reason_file_is_the_one_the_launcher_reads_and_never_overwrites(tmp_path,
                                                                                   boot):
    assert (boot.EXIT_FAILED, boot.MAX_REASON_CHARS) == \
        (exit_reasons.EXIT_FAILED, exit_reasons.MAX_REASON_CHARS)
    why = tmp_path / "why"
    boot.leave_reason(str(why), "ValueError: " + "x" * 3000)
    text, caused_by_other = read_reason(str(why))
    assert text == ("ValueError: " + "x" * 3000)[:exit_reasons.MAX_REASON_CHARS]
    assert not caused_by_other
    boot.leave_reason(str(why), "OSError: a later one")     # its own: the later one wins
    assert read_reason(str(why)) == ("OSError: a later one", False)
    write_reason(str(why), "KVStoreError: the run was aborted", caused_by_other=True)
    boot.leave_reason(str(why), "KVStoreError: the run was aborted")   # netstorm's stays
    assert read_reason(str(why)) == ("KVStoreError: the run was aborted", True)
    boot.leave_reason("", "nowhere")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["why"]     # no temporary left


def test_an_uncaught_exception_leaves_type_and_message_then_the_old_hook_runs(tmp_path, boot,
                                                                               monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *a: seen.append(a[0]))
    why = tmp_path / "why"
    boot.install_reason_hook(str(why))
    sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)     # a stop: no cause
    assert not why.exists()
    sys.excepthook(OverflowError, OverflowError("cannot convert float infinity to integer"),
                   None)
    assert read_reason(str(why)) == ("OverflowError: cannot convert float infinity to integer",
                                     False)
    assert seen == [KeyboardInterrupt, OverflowError]
    assert boot.describe(ZeroDivisionError, ZeroDivisionError()) == "ZeroDivisionError"


def test_a_wrong_python_is_told_both_interpreters_and_the_fix(tmp_path, boot):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "activate").touch()
    error = ModuleNotFoundError("No module named 'netstorm'")
    text = boot.wrong_python(error, {"NETSTORM_LAUNCHER_PYTHON": str(venv / "python")})
    assert text == (f"this worker's Python ({sys.executable}) cannot import netstorm (No "
                    f"module named 'netstorm'), but the launcher runs on {venv / 'python'}: "
                    f"start CMD with that Python ({venv / 'python'} ...), or source "
                    f"{venv / 'activate'} before starting the launcher")
    assert "put it first on PATH" in boot.wrong_python(
        error, {"NETSTORM_LAUNCHER_PYTHON": "/usr/bin/python3.11"})
    assert "virtualenv's Python" in boot.wrong_python(error, {})


def test_only_the_launcher_s_own_child_stops_and_only_its_workers_refuse_stock_stores(boot):
    assert boot.started_by_the_launcher({"NETSTORM_LAUNCHER_PID": str(os.getppid())})
    assert not boot.started_by_the_launcher({"NETSTORM_LAUNCHER_PID": str(os.getpid())})
    assert not boot.started_by_the_launcher({"NETSTORM_LAUNCHER_PID": "x"})
    assert not boot.started_by_the_launcher({})
    worker = {"NETSTORM_SCHEDULER": "tcp://127.0.0.1:9000"}
    assert boot.under_the_launcher_without_dist_sync(worker)
    assert not boot.under_the_launcher_without_dist_sync({**worker,
                                                          "NETSTORM_AS_DIST_SYNC": "1"})
    assert not boot.under_the_launcher_without_dist_sync({**worker, "DMLC_ROLE": "worker"})
    assert not boot.under_the_launcher_without_dist_sync({})
