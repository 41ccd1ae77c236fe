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
