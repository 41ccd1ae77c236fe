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
