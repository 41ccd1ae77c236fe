"""netstorm.launcher.logs and the flags that feed it: the launcher's --log-level, --quiet and
--log-dir, the level names every process shares (the entry points' flags, the workers'
boot), the files a run's lines go to and what happens when one cannot be written. The live
run (every process's file, --quiet on a cluster) is tests/cluster/test_launcher_logs.py."""
import io
import logging

import pytest

from netstorm.geoserver import cli as node_cli
from netstorm.launcher import cli
from netstorm.launcher.logs import LAUNCHER_FILE, LEVEL_VARIABLE, LogDirError, RunLog, file_name
from netstorm.launcher.processes import Launcher


def test_every_process_gets_a_file_named_after_its_prefix():
    assert file_name("scheduler") == "scheduler.log"
    assert file_name("server eu-west") == "server-eu-west.log"
    assert file_name("worker eu/0") == "worker-eu-0.log"
    assert file_name("launch") == LAUNCHER_FILE == "launcher.log"
    assert file_name("host 10.0.0.2") == "host-10.0.0.2.log"
    assert file_name("host ::1") == "host-__1.log"                 # no ':' in a file name
    assert file_name("host ../../etc") == "host-..-..-etc.log"     # no folder either


def test_the_level_names_map_to_logging_s_levels():
    assert node_cli.LOG_LEVELS == {"debug": logging.DEBUG, "info": logging.INFO,
                                   "warning": logging.WARNING, "error": logging.ERROR}
    assert RunLog(io.StringIO(), level="warning").process_args() == ["--log-level", "warning"]
    assert RunLog(io.StringIO(), level="debug").worker_env() == {LEVEL_VARIABLE: "debug"}
    assert RunLog(io.StringIO()).level == "info"
    with pytest.raises(ValueError, match="log level 'verbose' is not one of debug, info"):
        RunLog(io.StringIO(), level="verbose")


@pytest.mark.parametrize("flags, level", [
    ([], "info"), (["--quiet"], "warning"), (["--log-level", "error"], "error"),
    (["--log-level", "debug"], "debug")])
def test_the_launcher_s_level_flags(flags, level):
    args = cli.parse_args(["--dcs", "2", *flags, "--", "true"])
    assert args.log_level == level and args.log_dir is None


@pytest.mark.parametrize("flags, message", [
    (["--dcs", "2", "--quiet", "--log-level", "info"],
     "argument --log-level: not allowed with argument --quiet"),
    (["--dcs", "2", "--log-level", "verbose"], "argument --log-level: invalid choice: "
                                               "'verbose' (choose from 'debug', 'info'"),
    (["--cluster", "c.toml", "--ssh", "--quiet"],
     "--quiet does not reach the hosts of --ssh yet: their processes log at info"),
    (["--dcs", "2", "--slurm", "--log-level", "debug"],
     "--log-level does not reach the hosts of --slurm yet"),
    (["--dcs", "2", "--log-dir", "a\nb"], "argument --log-dir: ")])
def test_bad_level_flags_are_usage_errors_naming_the_flag(capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        cli.parse_args([*flags, "--", "true"])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_log_dir_with_ssh_is_accepted():
    args = cli.parse_args(["--cluster", "c.toml", "--ssh", "--log-dir", "logs", "--", "true"])
    assert args.log_dir == "logs" and args.log_level == "info"


def test_a_log_dir_that_cannot_be_a_folder_stops_the_launch_before_anything(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("a file")
    assert cli.main(["--dcs", "1", "--log-dir", str(taken), "--", "true"]) == 2
    assert capsys.readouterr().err == f"launch: --log-dir {taken}: exists and is not a " \
                                      f"folder\n"
    with pytest.raises(LogDirError, match=r"--log-dir .*: cannot make the folder: "):
        RunLog(io.StringIO(), taken / "below")
    folder = tmp_path / "logs"
    (folder / LAUNCHER_FILE).mkdir(parents=True)       # launcher.log cannot be a file
    with pytest.raises(LogDirError, match=r"--log-dir .*logs: cannot write launcher.log in it"):
        RunLog(io.StringIO(), folder)


def test_each_process_s_lines_go_to_the_console_and_its_own_file(tmp_path):
    console = io.StringIO()
    folder = tmp_path / "new" / "logs"                  # made, parents too
    with RunLog(console, folder) as log:
        log.started("scheduler")
        log.started("worker eu/0")
        log.emit("worker eu/0", "step 1\n")
        log.emit("server eu", "no newline")
        log.emit("launch", "ok: 1 DC(s)")
        print("[launch] printed by the launcher", file=log, flush=True)
    assert console.getvalue() == ("[worker eu/0] step 1\n[server eu] no newline\n"
                                  "[launch] ok: 1 DC(s)\n[launch] printed by the launcher\n")
    files = {p.name: p.read_text() for p in folder.iterdir()}
    assert files == {"scheduler.log": "",               # started, said nothing: still a file
                     "worker-eu-0.log": "[worker eu/0] step 1\n",
                     "server-eu.log": "[server eu] no newline\n",
                     "launcher.log": "[launch] ok: 1 DC(s)\n[launch] printed by the launcher\n"}


def test_a_restarted_process_appends_and_a_new_run_truncates(tmp_path):
    with RunLog(io.StringIO(), tmp_path) as log:
        log.started("worker eu/0")
        log.emit("worker eu/0", "first life")
        log.started("worker eu/0")                      # restarted into its rank
        log.emit("worker eu/0", "second life")
    assert (tmp_path / "worker-eu-0.log").read_text() == \
        "[worker eu/0] first life\n[worker eu/0] second life\n"
    with RunLog(io.StringIO(), tmp_path) as log:        # the next run, same folder
        log.started("worker eu/0")
        log.emit("worker eu/0", "next run")
    assert (tmp_path / "worker-eu-0.log").read_text() == "[worker eu/0] next run\n"


def test_quiet_drops_the_launcher_s_info_lines_but_never_a_process_s_or_a_failure(tmp_path):
    for level, shown in (("info", True), ("warning", False), ("error", False)):
        console = io.StringIO()
        with RunLog(console, tmp_path, level) as log:
            log.info("launch", "ok: 1 DC(s)")
            log.emit("launch", "worker eu/0 exited with code 1; stopping the cluster")
            log.emit("worker eu/0", "12:00:00.000 INFO netstorm.worker: said by the worker")
        lines = console.getvalue().splitlines()
        assert ("[launch] ok: 1 DC(s)" in lines) is shown
        assert len(lines) == 2 + shown
        assert (tmp_path / "launcher.log").read_text().splitlines() == lines[:1 + shown]


class _FullDisk(io.StringIO):
    def write(self, text):
        raise OSError(28, "No space left on device")


def test_a_file_that_fails_is_said_once_and_the_console_goes_on(tmp_path):
    console = io.StringIO()
    with RunLog(console, tmp_path) as log:
        log.started("worker eu/0")
        log._files["worker-eu-0.log"] = _FullDisk()
        for step in range(3):
            log.emit("worker eu/0", f"step {step}")
        log.emit("launch", "ok")
    assert console.getvalue().splitlines() == [
        "[worker eu/0] step 0",
        f"[launch] cannot write {tmp_path / 'worker-eu-0.log'}: No space left on device; its "
        f"lines go to the console only",
        "[worker eu/0] step 1", "[worker eu/0] step 2", "[launch] ok"]
    assert (tmp_path / "launcher.log").read_text() == "[launch] ok\n"


def test_the_launcher_writes_through_its_run_log_or_a_plain_stream(tmp_path):
    console = io.StringIO()
    with RunLog(console, tmp_path) as log:
        Launcher(log)._emit("launch", "through the run log")
    plain = io.StringIO()
    launcher = Launcher(plain)
    launcher._emit("scheduler", "through a stream")
    assert launcher.out is plain and launcher.output.folder is None
    assert console.getvalue() == "[launch] through the run log\n"
    assert plain.getvalue() == "[scheduler] through a stream\n"
    assert (tmp_path / "launcher.log").read_text() == "[launch] through the run log\n"


@pytest.mark.parametrize("entry", ["netstorm.scheduler.__main__", "netstorm.geoserver.__main__"])
def test_the_scheduler_and_the_servers_take_the_level_by_flag(entry):
    import importlib
    parse = importlib.import_module(entry).parse_args
    needed = ["--cluster", "c.toml"] + (["--dc", "eu"] if "geoserver" in entry else [])
    assert parse(needed).log_level == "info"
    assert parse([*needed, "--log-level", "warning"]).log_level == "warning"
    assert parse([*needed, "--verbose"]).log_level == "debug"      # as before: debug
    with pytest.raises(SystemExit):
        parse([*needed, "--log-level", "loud"])


@pytest.fixture
def boot():
    import importlib.util

    from netstorm.launcher.supervisor import BOOT_DIR
    spec = importlib.util.spec_from_file_location("boot_logs_under_test",
                                                  BOOT_DIR / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_workers_boot_shares_the_level_names_and_the_format(boot):
    assert boot.LOG_LEVELS == tuple(node_cli.LOG_LEVELS)
    assert (boot.LOG_FORMAT, boot.LOG_DATE_FORMAT) == (node_cli.LOG_FORMAT,
                                                       node_cli.LOG_DATE_FORMAT)
    assert boot.LEVEL_VARIABLE == LEVEL_VARIABLE == "NETSTORM_LOG_LEVEL"


@pytest.mark.parametrize("level, shown", [("debug", ["DEBUG", "INFO", "WARNING"]),
                                          ("info", ["INFO", "WARNING"]),
                                          ("warning", ["WARNING"]), ("error", [])])
def test_a_worker_s_netstorm_lines_follow_its_level_and_stay_out_of_the_script_s(
        boot, capsys, level, shown):
    name = f"netstorm_boot_test_{level}"           # a logger of its own: nothing leaks
    logger = logging.getLogger(name)
    try:
        assert boot.log_netstorm_at(level, name)
        below = logging.getLogger(f"{name}.worker")
        below.debug("d")
        below.info("i")
        below.warning("w")
        lines = capsys.readouterr().err.splitlines()
        assert [line.split()[1] for line in lines] == shown
        assert all(line.split()[2] == f"{name}.worker:" for line in lines)
        assert not logger.propagate                # a script's basicConfig repeats none
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)


def test_a_worker_given_an_unknown_level_says_so_and_runs_on(boot, capsys):
    assert not boot.log_netstorm_at("loud", "netstorm_boot_test_unknown")
    assert capsys.readouterr().err == (
        "netstorm launcher: warning: NETSTORM_LOG_LEVEL='loud' is not one of debug, info, "
        "warning, error; netstorm's log level left as it was\n")
    assert not logging.getLogger("netstorm_boot_test_unknown").handlers


def test_over_ssh_each_host_s_lines_go_to_its_file_on_the_launching_host(tmp_path):
    from netstorm.launcher.ssh import SshLauncher
    with RunLog(io.StringIO(), tmp_path) as log:
        SshLauncher(log)._emit("host 10.0.0.2", "[worker eu/0] step 1")
    assert (tmp_path / "host-10.0.0.2.log").read_text() == \
        "[host 10.0.0.2] [worker eu/0] step 1\n"
