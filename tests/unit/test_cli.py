"""The process entry points' shared helpers (geoserver/cli.py): a signal is never swallowed."""
import os
import signal

import pytest

from netstorm.geoserver.cli import StopSignals, Terminated, raise_on_signals


class _RaisesInDel:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)     # delivered here: Python ignores the raise


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the point
def test_a_signal_lost_inside_a_destructor_is_raised_by_the_next_check():
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop = raise_on_signals()
        stop.check()                             # nothing yet
        obj = _RaisesInDel()
        del obj                                  # "Exception ignored in ... Terminated"
        with pytest.raises(Terminated, match="SIGTERM"):
            stop.check()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def test_check_is_quiet_until_a_signal_came():
    StopSignals().check()


def test_a_reason_file_says_why_and_whether_another_node_was_the_cause(tmp_path):
    from netstorm.geoserver.config.exit_reasons import read_reason, read_stop_note, write_reason
    path = tmp_path / "r"
    write_reason(str(path), "server of dc1 (node 2) sent nothing", caused_by_other=True)
    assert read_reason(str(path)) == ("server of dc1 (node 2) sent nothing", True)
    write_reason("", "nowhere")                              # no file given: nothing
    path.write_text("not json")
    assert read_reason(str(path)) == ("", False)
    assert read_reason(str(tmp_path / "missing")) == ("", False)
    write_reason(str(tmp_path / "stopping"), "worker dc1/0 was killed by SIGKILL")
    assert read_stop_note(str(tmp_path)) == "worker dc1/0 was killed by SIGKILL"
    assert read_stop_note("") == ""


def test_stop_signals_as_a_block_raise_terminated_and_put_the_handlers_back():
    """The tools' use (launcher, emulated WAN, benchmark): inside the block the signals
    raise Terminated, a KeyboardInterrupt with the shell's exit code; after it, the handlers
    are what they were."""
    before = signal.getsignal(signal.SIGHUP)
    with pytest.raises(KeyboardInterrupt) as caught:
        with StopSignals(signal.SIGTERM, signal.SIGHUP):
            os.kill(os.getpid(), signal.SIGHUP)
    assert isinstance(caught.value, Terminated) and str(caught.value) == "SIGHUP"
    assert caught.value.exit_code == 128 + signal.SIGHUP
    assert signal.getsignal(signal.SIGHUP) is before
