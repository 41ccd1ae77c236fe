"""launcher_processes: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_launcher_processes.py."""

import sys


def test_a_process_that_exits_before_reading_its_input_is_reported_not_a_crash():
    """ssh to a host that does not answer exits at once: writing its bundle to the closed
    pipe must not crash the launcher; the process's exit code is what is reported."""
    import io

    from netstorm.launcher.processes import Launcher
    out = io.StringIO()
    with Launcher(out) as launcher:
        proc = launcher.start("host x", "host", [sys.executable, "-c", "import sys; sys.exit(255)"],
                              {}, stdin_data=b"x" * (4 << 20))
        assert launcher.wait(0) == 255 and proc.popen.returncode == 255
    assert "[launch] host x exited with code 255" in out.getvalue()


def test_a_killed_scheduler_is_started_again_while_restarts_are_left():
    """[recovery] scheduler_restarts: the launcher starts the same command again (the nodes
    re-register with the new scheduler), then, once the restarts are used, stops the cluster
    naming it."""
    import io
    import sys

    from netstorm.launcher.processes import Launcher
    out = io.StringIO()
    kill_self = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    with Launcher(out, scheduler_restarts=1) as launcher:
        launcher.start("scheduler", "scheduler", kill_self, {})
        assert launcher.wait(0) == 1
    text = out.getvalue()
    assert "[launch] scheduler was killed by SIGKILL; starting a new one; the nodes " \
        "re-register with it (1 of 1)" in text
    assert "[launch] scheduler was killed by SIGKILL; stopping the cluster" in text
