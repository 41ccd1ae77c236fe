"""netstorm.geoserver.config.uncaught and the entry points that use it (netstorm-launch,
netstorm-keygen, netstorm-wan): an unexpected exception is one line ``PROG: error: Type:
message`` and exit status 2; the traceback goes to a file the line names, or to stderr with
--debug or NETSTORM_DEBUG=1 (read by the entry point only)."""
import re
from pathlib import Path

import pytest

from netstorm.geoserver.config.uncaught import debug_wanted, report_uncaught


def test_debug_is_asked_by_the_flag_before_the_command_or_the_variable():
    assert debug_wanted(["--dcs", "2", "--debug", "--", "x"], {})
    assert not debug_wanted(["--dcs", "2", "--", "train.py", "--debug"], {})
    assert debug_wanted([], {"NETSTORM_DEBUG": "1"})
    assert not debug_wanted([], {"NETSTORM_DEBUG": "0"}) and not debug_wanted([], {})


def _boom():
    raise OverflowError("cannot convert float infinity\nto integer")


def test_one_line_names_the_type_and_the_message_and_where_the_traceback_is(tmp_path,
                                                                          monkeypatch, capsys):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    try:
        _boom()
    except OverflowError as exc:
        assert report_uncaught("netstorm-x", exc, debug=False) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    match = re.fullmatch(r"netstorm-x: error: OverflowError: cannot convert float infinity to "
                         r"integer \(unexpected; traceback in (\S+)\)\n", err)
    assert match, err
    kept = Path(match.group(1)).read_text()
    assert kept.startswith("Traceback") and "_boom" in kept
    try:
        _boom()
    except OverflowError as exc:
        report_uncaught("netstorm-x", exc, debug=True)
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("(unexpected; traceback above)\n")


@pytest.mark.parametrize("module, patch, argv, prog", [
    ("netstorm.launcher.cli", "load_cluster", ["--cluster", "c.toml", "--", "true"],
     "netstorm-launch"),
    ("netstorm.launcher.keygen", "keygen", ["c.toml"], "netstorm-keygen"),
    ("netstorm.wan.cli", "_topology", ["up", "small"], "netstorm-wan"),
])
def test_every_entry_point_turns_an_unexpected_error_into_one_line(module, patch, argv, prog,
                                                                   tmp_path, monkeypatch,
                                                                   capsys):
    import importlib
    entry = importlib.import_module(module)

    def fail(*args, **kwargs):
        raise OverflowError("cannot convert float infinity to integer")
    monkeypatch.setattr(entry, patch, fail)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.delenv("NETSTORM_DEBUG", raising=False)
    assert entry.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{prog}: error: OverflowError: cannot convert float infinity to "
                          f"integer (unexpected; traceback in {tmp_path}")
    assert "Traceback" not in err and err.count("\n") == 1
    monkeypatch.setenv("NETSTORM_DEBUG", "1")
    assert entry.main(argv) == 2
    assert "Traceback" in capsys.readouterr().err
