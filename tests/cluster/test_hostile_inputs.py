"""Issue 37's "Done when", through real processes: hostile cluster files and command lines
given to scripts/launch.py, scripts/keygen.py and netstorm-wan as a user would. Each exits 2
within a generous timeout (SUBPROCESS_TIMEOUT_S; the time it took is printed, pytest -s),
names the file and field or the flag, prints no traceback, leaves no process behind and
never runs the worker command (which would create a marker file), and leaves the user's files
byte-identical. A few cases of each tool, since each costs a Python start (about a second);
the many more, in-process: tests/unit/test_hostile_inputs.py."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from launching import REPO, leftovers

SUBPROCESS_TIMEOUT_S = 30      # generous: each case ends in about a second (printed)

GOOD = """\
[scheduler]
host = "127.0.0.1"
port = 9000

[[dc]]
name = "eu"
host = "127.0.0.1"
server_port = 0
workers = 1

[transport]
heartbeat_s = 0.5
"""

SCRIPT = {"launch": REPO / "scripts" / "launch.py", "keygen": REPO / "scripts" / "keygen.py",
          "wan": REPO / "scripts" / "wan.py"}
CASES = [   # (id, tool, the file's text or None, its arguments and what the error must name;
            # {file}: the file)
    ("launch-dc-name-latin-accent", "launch", GOOD.replace('"eu"', '"ëu"'),
     ["--cluster", "{file}"], ["{file} [[dc]] #1: DC name 'ëu'"]),
    ("launch-heartbeat-nan", "launch", GOOD.replace("0.5", "nan"), ["--cluster", "{file}"],
     ["{file} [transport]: heartbeat_s must be a finite number"]),
    ("launch-a-million-workers", "launch", GOOD.replace("workers = 1", "workers = 1000000"),
     ["--cluster", "{file}"], ["{file} DC 'eu': workers must be a whole number in 1..65533"]),
    ("launch-timeout-nan", "launch", GOOD, ["--cluster", "{file}", "--timeout", "nan"],
     ["argument --timeout: must be a finite number"]),
    ("keygen-dc-name-cjk", "keygen", GOOD.replace('"eu"', '"数据中心"'), ["{file}"],
     ["{file} [[dc]] #1: DC name", "[A-Za-z0-9_-]"]),
    ("wan-rate-inf", "wan", None, ["set-rate", "--run", "x", "a", "b", "inf"],
     ["argument mbps: must be a finite number"]),
]


@pytest.mark.parametrize("tool, text, args, named",
                         [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_a_hostile_input_fails_fast_naming_it_and_starts_nothing(tmp_path, tool, text, args,
                                                                 named):
    user = tmp_path / "user"
    user.mkdir()
    path = user / "cluster.toml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    before = {p: p.read_bytes() for p in user.rglob("*")}
    marker = tmp_path / "marker"
    argv = [sys.executable, str(SCRIPT[tool]), *(a.format(file=path) for a in args)]
    if tool == "launch":
        argv += ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
                          cwd=tmp_path, env=dict(os.environ, TMPDIR=str(tmp_path)))
    print(f"{tool} {' '.join(args)}: exit {proc.returncode} after "
          f"{time.monotonic() - started:.2f} s")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert all(n.format(file=path) in output for n in named), output
    assert "Traceback" not in output and "unexpected" not in output, output
    assert not marker.exists() and leftovers(str(tmp_path)) == []
    assert {p: p.read_bytes() for p in user.rglob("*")} == before
