"""The catch-all of the process entry points (``python -m netstorm.scheduler``, ``python -m
netstorm.geoserver``): an error outside netstorm's own ends the process with code 1 and its
``Type: message`` in the reason file, the launcher's line (exit_reasons.describe)."""
import pytest

from netstorm.geoserver import __main__ as server_main
from netstorm.geoserver.config.exit_reasons import EXIT_FAILED, describe, read_reason
from netstorm.scheduler import __main__ as scheduler_main

OVERFLOW = "cannot convert float infinity to integer"


def test_describe_is_type_colon_message_or_the_type_alone():
    assert describe(OverflowError(OVERFLOW)) == f"OverflowError: {OVERFLOW}"
    assert describe(KeyError("eu")) == "KeyError: 'eu'"
    assert describe(ZeroDivisionError()) == "ZeroDivisionError"


def _overflow(_path):
    raise OverflowError(OVERFLOW)


@pytest.mark.parametrize("main, argv", [
    (scheduler_main, ["--cluster", "c.toml"]),
    (server_main, ["--cluster", "c.toml", "--dc", "eu"]),
], ids=["scheduler", "server"])
def test_an_error_outside_netstorm_s_own_is_the_reason_not_a_traceback_alone(
        tmp_path, monkeypatch, main, argv, caplog):
    monkeypatch.setattr(main, "load_cluster", _overflow)
    why = tmp_path / "why"
    assert main.main([*argv, "--reason-file", str(why)]) == EXIT_FAILED
    assert read_reason(str(why)) == (f"OverflowError: {OVERFLOW}", False)
    assert f"stops on an unexpected error: OverflowError: {OVERFLOW}" in caplog.text


def test_an_os_error_is_logged_without_a_traceback(tmp_path, monkeypatch, caplog):
    def missing(_path):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(scheduler_main, "load_cluster", missing)
    why = tmp_path / "why"
    assert scheduler_main.main(["--cluster", "c.toml", "--reason-file", str(why)]) == 1
    assert read_reason(str(why))[0] == "PermissionError: [Errno 13] Permission denied"
    assert "Traceback" not in caplog.text


class _Postoffice:
    def __init__(self, me):
        self.me, self.sent = me, []

    def send_scheduler(self, msg):
        self.sent.append(msg)


def test_a_failing_server_tells_the_scheduler_only_once_registered():
    unregistered, registered = _Postoffice(None), _Postoffice(object())
    server_main._tell_scheduler(None, "x")
    server_main._tell_scheduler(unregistered, "x")
    server_main._tell_scheduler(registered, "server of eu failed: KeyError: 'eu'")
    assert unregistered.sent == []
    assert [m.meta for m in registered.sent] == [{"reason": "server of eu failed: KeyError: 'eu'"}]
