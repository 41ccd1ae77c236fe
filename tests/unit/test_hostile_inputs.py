"""Issue 37's "Done when": broken and hostile cluster files and command lines, fed to the
validator (load_cluster), the launcher (netstorm-launch's main) and keygen (netstorm-keygen's
main), in this process. Each must fail with exit status 2 (or ClusterFileError), naming the
file and the field, or the flag; print no traceback; start nothing (the launcher's run
functions are replaced by a recorder, and tests/unit's conftest refuses any process or
socket); and leave every file of the user's folder byte-identical, none added. Each case runs
under a generous alarm (CASE_TIMEOUT_S): a hang fails it; the time each takes is pytest's
``--durations=0``. The same through real subprocesses: tests/cluster/test_hostile_inputs.py.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster
from netstorm.launcher import cli, keygen

CASE_TIMEOUT_S = 2.0    # the bound, generous here: a case takes milliseconds

GOOD = """\
[scheduler]
host = "127.0.0.1"
port = 9000
stats = "stats.jsonl"

[[dc]]
name = "eu"
host = "127.0.0.1"
server_port = 9100
workers = 2

[[dc]]
name = "us"
host = "127.0.0.1"
server_port = 9101
workers = 1

[transport]
chunk_bytes = 65536
timeout_s = 30
heartbeat_s = 0.5
dead_after_s = 10
stall_s = 3
fuse_bytes = 1024
fuse_linger_s = 0.001

[wan]
policy = "fapt"
replan_threshold = 0.2
min_dwell_s = 10

[[link]]
a = "eu"
b = "us"
mbps = 100
latency_ms = 20
"""

# (id, the text replaced in GOOD, its replacement, what the error must name besides the file)
FILE_CASES = [
    ("dc-name-latin-accent", 'name = "eu"', 'name = "ëu"', "DC name"),
    ("dc-name-cjk", 'name = "eu"', 'name = "数据中心"', "[A-Za-z0-9_-]"),
    ("dc-name-cyrillic-lookalike", 'name = "us"', 'name = "еu"', "U+0435"),
    ("dc-name-space", 'name = "eu"', 'name = "e u"', "DC name"),
    ("dc-name-empty", 'name = "eu"', 'name = ""', "DC name"),
    ("dc-name-too-long", 'name = "eu"', f'name = "{"e" * 65}"', "DC name"),
    ("dc-name-bell", 'name = "eu"', 'name = "e\\u0007u"', "[[dc]] #1 name"),
    ("host-newline", 'host = "127.0.0.1"\nport', 'host = "127.0.0.1\\n"\nport',
     "[scheduler] host"),
    ("stats-escape-sequence", 'stats = "stats.jsonl"', 'stats = "\\u001b[31mx"',
     "[scheduler] stats"),
    ("string-too-long", 'stats = "stats.jsonl"', f'stats = "{"s" * 5000}"', "[scheduler] stats"),
    ("heartbeat-nan", "heartbeat_s = 0.5", "heartbeat_s = nan", "heartbeat_s"),
    ("heartbeat-tiny", "heartbeat_s = 0.5", "heartbeat_s = 1e-9", "heartbeat_s"),
    ("timeout-inf", "timeout_s = 30", "timeout_s = inf", "timeout_s"),
    ("timeout-1e308", "timeout_s = 30", "timeout_s = 1e308", "timeout_s"),
    ("timeout-over-a-day", "timeout_s = 30", "timeout_s = 86401", "timeout_s"),
    ("dead-after-minus-inf", "dead_after_s = 10", "dead_after_s = -inf", "dead_after_s"),
    ("stall-zero", "stall_s = 3", "stall_s = 0", "stall_s"),
    ("timeout-below-two-heartbeats", "timeout_s = 30", "timeout_s = 0.9", "timeout_s"),
    ("max-idle-nan", "timeout_s = 30", "timeout_s = 30\nmax_idle_s = nan", "max_idle_s"),
    ("mbps-inf", "mbps = 100", "mbps = inf", "mbps"),
    ("mbps-1e-300", "mbps = 100", "mbps = 1e-300", "mbps"),
    ("mbps-nan", "mbps = 100", "mbps = nan", "mbps"),
    ("mbps-negative", "mbps = 100", "mbps_ab = -1\nmbps_ba = 5", "mbps_ab"),
    ("mbps-string", "mbps = 100", 'mbps = "fast"', "mbps"),
    ("latency-nan", "latency_ms = 20", "latency_ms = nan", "latency_ms"),
    ("latency-1e9", "latency_ms = 20", "latency_ms = 1e9", "latency_ms"),
    ("scheduler-port-0", "port = 9000", "port = 0", "every node must know where to reach it"),
    ("scheduler-port-65536", "port = 9000", "port = 65536", "port"),
    ("server-port-negative", "server_port = 9100", "server_port = -1", "server_port"),
    ("server-port-float", "server_port = 9100", "server_port = 9100.5", "server_port"),
    ("workers-million", "workers = 2", "workers = 1000000", "workers"),
    ("workers-zero", "workers = 2", "workers = 0", "workers"),
    ("workers-negative", "workers = 2", "workers = -3", "workers"),
    ("workers-float", "workers = 2", "workers = 2.5", "workers"),
    ("workers-bool", "workers = 2", "workers = true", "workers"),
    ("nodes-over-the-wire-cap", "workers = 1\n", "workers = 65533\n", "16-bit"),
    ("chunk-bytes-zero", "chunk_bytes = 65536", "chunk_bytes = 0", "chunk_bytes"),
    ("chunk-bytes-terabyte", "chunk_bytes = 65536", "chunk_bytes = 1099511627776",
     "chunk_bytes"),
    ("fuse-bytes-negative", "fuse_bytes = 1024", "fuse_bytes = -1", "fuse_bytes"),
    ("fuse-linger-nan", "fuse_linger_s = 0.001", "fuse_linger_s = nan", "fuse_linger_s"),
    ("replan-threshold-nan", "replan_threshold = 0.2", "replan_threshold = nan",
     "replan_threshold"),
    ("min-dwell-inf", "min_dwell_s = 10", "min_dwell_s = inf", "min_dwell_s"),
    ("worker-restarts-negative", "min_dwell_s = 10",
     "min_dwell_s = 10\n[recovery]\nworker_restarts = -1", "worker_restarts"),
    ("server-restarts-1000", "min_dwell_s = 10",
     "min_dwell_s = 10\n[recovery]\nserver_restarts = 1000", "server_restarts"),
    ("emulated-delay-nan", "min_dwell_s = 10",
     'min_dwell_s = 10\n[emulation]\ndelay_ms = [["eu", "us", nan]]', "delay_ms[0]"),
    ("emulated-delay-list-for-a-dc", "min_dwell_s = 10",
     'min_dwell_s = 10\n[emulation]\ndelay_ms = [[[], "us", 1]]', "delay_ms[0]"),
    ("sync-k1-zero", "min_dwell_s = 10", 'min_dwell_s = 10\n[sync]\nmode = "hfa"\nk1 = 0',
     "k1"),
    ("sync-mode-a-list", "min_dwell_s = 10", "min_dwell_s = 10\n[sync]\nmode = []",
     "sync mode"),
    ("compression-ratio-nan", "min_dwell_s = 10",
     'min_dwell_s = 10\n[compression]\ntype = "bsc"\nratio = nan', "ratio"),
    ("ssh-port-0", "min_dwell_s = 10", "min_dwell_s = 10\n[ssh]\nport = 0", "[ssh]: port"),
    ("ssh-option-newline", "min_dwell_s = 10",
     'min_dwell_s = 10\n[ssh]\noptions = ["-o", "ProxyCommand=x\\ny"]', "[ssh] options[1]"),
    ("dc-key-name-control", "min_dwell_s = 10",
     'min_dwell_s = 10\n[security]\ndc_keys = {"e\\u0000u" = "k"}', "[security] dc_keys"),
    ("bare-non-ascii-key", "min_dwell_s = 10", "min_dwell_s = 10\n[security.dc_keys]\nëu = 1",
     "not valid TOML"),
    ("deeply-nested", "min_dwell_s = 10", "min_dwell_s = 10\nx = " + "[" * 5000 + "]" * 5000,
     "nested too deeply"),
    ("typo-field", "stall_s = 3", "stal_s = 3", "did you mean 'stall_s'"),
]

RAW_CASES = [   # (id, the file's bytes, what the error must name besides the file)
    ("not-utf8", GOOD.encode() + b'\n# caf\xe9\n', "not UTF-8"),
    ("binary-junk", bytes(range(256)) * 4, "not"),
    ("over-a-mebibyte", GOOD.encode() + b"#" * (1 << 20) + b"\n", "larger than"),
]


def _cases() -> list:
    cases = []
    for name, old, new, named in FILE_CASES:
        assert old in GOOD, name
        cases.append(pytest.param(GOOD.replace(old, new, 1).encode(), named, id=name))
    return cases + [pytest.param(data, named, id=name) for name, data, named in RAW_CASES]


def _snapshot(folder: Path) -> dict:
    """Every file under ``folder``: its bytes and permission bits."""
    return {p: (p.read_bytes(), p.stat().st_mode) for p in sorted(folder.rglob("*"))
            if p.is_file()} | {p: "dir" for p in folder.rglob("*") if p.is_dir()}


class _CaseTimeout(BaseException):
    """Raised by the alarm: the case did not end within CASE_TIMEOUT_S."""


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """A user's folder (``user``) whose files must come out byte-identical; the launcher's
    starts recorded (a hostile input must never get there); the case under an alarm."""
    user = tmp_path / "user"
    user.mkdir()
    started = []
    monkeypatch.setattr(cli, "run_cluster", lambda *a, **k: started.append(a) or 0)
    monkeypatch.setattr(cli, "run_over_ssh", lambda *a, **k: started.append(a) or 0)
    monkeypatch.setattr(cli, "free_port", lambda: 9555)
    monkeypatch.setattr(cli, "_cores", lambda: 2)

    def expire(*_):
        raise _CaseTimeout(f"no answer within {CASE_TIMEOUT_S} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT_S)
    try:
        yield _Hostile(user, started)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Hostile:
    def __init__(self, user: Path, started: list):
        self.user, self.started = user, started
        self.marker = user.parent / "marker"        # the worker command would create it
        self.command = [sys.executable, "-c", f"open({str(self.marker)!r}, 'w')"]

    def run(self, main, argv, capsys) -> tuple:
        """``main(argv)``'s exit status and its stdout + stderr; the folder unchanged."""
        before = _snapshot(self.user)
        try:
            code = main(argv)
        except SystemExit as exc:       # argparse's refusal of a flag
            code = exc.code
        out, err = capsys.readouterr()
        assert _snapshot(self.user) == before, "the user's files changed"
        assert not self.started and not self.marker.exists(), "a process was started"
        assert "Traceback" not in out + err and "unexpected" not in err, err
        return code, out + err


@pytest.mark.parametrize("data, named", _cases())
def test_the_validator_refuses_a_hostile_file_naming_it_and_the_field(hostile, data, named):
    path = hostile.user / "cluster.toml"
    path.write_bytes(data)
    before = _snapshot(hostile.user)
    with pytest.raises(ClusterFileError) as info:
        load_cluster(path)
    assert str(path) in str(info.value) and named in str(info.value), str(info.value)
    assert _snapshot(hostile.user) == before


@pytest.mark.parametrize("data, named", _cases())
def test_the_launcher_refuses_a_hostile_file_before_starting_anything(hostile, capsys, data,
                                                                      named):
    path = hostile.user / "cluster.toml"
    path.write_bytes(data)
    code, output = hostile.run(cli.main, ["--cluster", str(path), "--", *hostile.command],
                               capsys)
    assert code == 2 and str(path) in output and named in output, output


@pytest.mark.parametrize("data, named", _cases())
def test_keygen_refuses_a_hostile_file_and_leaves_it_as_it_was(hostile, capsys, data, named):
    path = hostile.user / "cluster.toml"
    path.write_bytes(data)
    code, output = hostile.run(keygen.main, [str(path)], capsys)
    assert code == 2 and str(path) in output and named in output, output


FLAG_CASES = [   # (id, the launcher's flags, what the error must name)
    ("chunk-bytes-0", ["--dcs", "2", "--chunk-bytes", "0"], "--chunk-bytes"),
    ("chunk-bytes-float", ["--dcs", "2", "--chunk-bytes", "1.5"], "--chunk-bytes"),
    ("worker-restarts-negative", ["--dcs", "2", "--worker-restarts", "-1"],
     "--worker-restarts"),
    ("server-restarts-101", ["--dcs", "2", "--server-restarts", "101"], "--server-restarts"),
    ("cluster-restarts-word", ["--dcs", "2", "--cluster-restarts", "many"],
     "--cluster-restarts"),
    ("timeout-nan", ["--dcs", "2", "--timeout", "nan"], "--timeout"),
    ("timeout-inf", ["--dcs", "2", "--timeout", "inf"], "--timeout"),
    ("timeout-1e308", ["--dcs", "2", "--timeout", "1e308"], "--timeout"),
    ("timeout-negative", ["--dcs", "2", "--timeout", "-5"], "--timeout"),
    ("timeout-below-two-heartbeats", ["--dcs", "2", "--timeout", "0.5"], "--timeout"),
    ("max-idle-negative", ["--dcs", "2", "--max-idle", "-1"], "--max-idle"),
    ("max-idle-below-two-heartbeats", ["--dcs", "2", "--max-idle", "0.5"], "--max-idle"),
    ("dcs-0", ["--dcs", "0"], "--dcs"),
    ("dcs-million", ["--dcs", "1000000"], "--dcs"),
    ("workers-per-dc-0", ["--dcs", "2", "--workers-per-dc", "0"], "--workers-per-dc"),
    ("workers-per-dc-million", ["--dcs", "2", "--workers-per-dc", "1000000"],
     "--workers-per-dc"),
    ("nodes-over-the-wire-cap", ["--dcs", "2", "--workers-per-dc", "40000"], "16-bit"),
    ("too-many-per-core", ["--dcs", "4", "--workers-per-dc", "4"], "--yes"),
    ("bandwidth-scale-nan", ["--dcs", "2", "--bandwidth-scale", "nan"], "--bandwidth-scale"),
    ("stats-escape-sequence", ["--dcs", "2", "--stats", "\x1b[31mred"], "--stats"),
    ("checkpoint-nul", ["--dcs", "2", "--checkpoint", "a\x00b"], "--checkpoint"),
    ("compression-nan-ratio", ["--dcs", "2", "--compression", '{"type": "bsc", "ratio": NaN}'],
     "--compression"),
    ("compression-type-a-list", ["--dcs", "2", "--compression", '{"type": []}'],
     "--compression"),
    ("sync-k1-nan", ["--dcs", "2", "--sync", "hfa:k1=nan"], "--sync"),
    ("wan-too-many-per-core", ["--wan", "paper9", "--workers-per-dc", "2"], "--yes"),
    ("wan-timeout-below-two-heartbeats", ["--wan", "small", "--timeout", "0.5"], "--timeout"),
    ("wan-bandwidth-scale-zero", ["--wan", "small", "--bandwidth-scale", "0"],
     "--bandwidth-scale"),
]


@pytest.mark.parametrize("flags, named", [pytest.param(f, n, id=i) for i, f, n in FLAG_CASES])
def test_the_launcher_refuses_a_bad_flag_naming_it_before_starting_anything(hostile, capsys,
                                                                            flags, named):
    code, output = hostile.run(cli.main, [*flags, "--", *hostile.command], capsys)
    assert code == 2 and named in output, output


@pytest.mark.parametrize("flags, named", [
    (["--timeout", "1e9"], "--timeout"),
    (["--chunk-bytes", "-4096"], "--chunk-bytes"),
    (["--timeout", "0.5"], "--timeout"),
    (["--dc", "mars"], "no DC named 'mars'")])
def test_a_bad_flag_over_a_good_file_is_refused_naming_the_flag(hostile, capsys, flags, named):
    path = hostile.user / "cluster.toml"
    path.write_text(GOOD)
    code, output = hostile.run(cli.main, ["--cluster", str(path), *flags, "--",
                                          *hostile.command], capsys)
    assert code == 2 and named in output, output


def test_many_processes_per_core_start_with_yes_only(hostile, capsys):
    code, output = hostile.run(cli.main, ["--dcs", "4", "--workers-per-dc", "4", "--", "true"],
                               capsys)
    assert code == 2 and "21 processes on this host with 2 core(s)" in output and \
        "pass --yes" in output
    assert cli.main(["--dcs", "4", "--workers-per-dc", "4", "--yes", "--", "true"]) == 0
    assert len(hostile.started) == 1          # the recorder, not a process


@pytest.mark.parametrize("what", ["missing", "a-folder", "a-link-to-nowhere"])
def test_a_path_that_is_no_file_is_refused_by_every_tool_naming_it(hostile, capsys, what):
    path = hostile.user / "cluster.toml"
    if what == "a-folder":
        path.mkdir()
    elif what == "a-link-to-nowhere":
        path.symlink_to(hostile.user / "gone.toml")
    for main, argv in ((cli.main, ["--cluster", str(path), "--", *hostile.command]),
                       (keygen.main, [str(path)])):
        code, output = hostile.run(main, argv, capsys)
        assert code == 2 and f"cannot read cluster file {path}" in output, output
