"""kvstore/sigterm.py's handler on the main thread (the watching thread's part runs live in
tests/cluster/test_launch_faults.py): the first SIGTERM records why and ends the script, a
second one while it ends is ignored instead of raising inside its clean-up."""
import signal

import pytest

from netstorm.kvstore.sigterm import stop_on_sigterm


@pytest.fixture
def restore_sigterm():
    handler, wakeup = signal.getsignal(signal.SIGTERM), signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    yield
    signal.signal(signal.SIGTERM, handler)
    signal.set_wakeup_fd(wakeup)


def test_a_second_sigterm_while_the_first_ends_the_script_is_ignored(restore_sigterm):
    reasons = []
    stop_on_sigterm(lambda: reasons.append("stopped by SIGTERM") or reasons[-1],
                    report=lambda reason: None)
    on_sigterm = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as ended:
        on_sigterm(signal.SIGTERM, None)
    assert ended.value.code == 128 + signal.SIGTERM and reasons == ["stopped by SIGTERM"]
    assert on_sigterm(signal.SIGTERM, None) is None         # no second SystemExit
    assert reasons == ["stopped by SIGTERM"]
