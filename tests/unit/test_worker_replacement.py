"""A worker's part in replacing its lost DC server (geoserver/worker/replacement.py): what it
sends the replacement again, and a round it no longer keeps."""
import numpy as np

from netstorm.geoserver.core.nodes import NodeInfo
from netstorm.geoserver.core.wire import Flag, Kind, Message
from netstorm.geoserver.worker.keys import KeyInfo
from netstorm.geoserver.worker.pending import Pending
from netstorm.geoserver.worker.replacement import ServerReplacement, pushed_summary
from netstorm.geoserver.worker.requests import Requests


class Link:
    """The link to the server of eu: what was sent, to whom."""
    def __init__(self):
        self.server = NodeInfo(1, "server", "eu", "tcp://127.0.0.1:2")
        self.po, self.sent = self, []

    def send(self, node, msg):
        self.sent.append((node, msg.kind, msg.key, msg.seq, msg.flags))


def _replacement(pushes):
    keys = {5: KeyInfo(5, (2,), np.dtype(np.float32), pushes=pushes)}
    return ServerReplacement(Requests(0, 30.0, False), Link(), keys, keep_pushes=True)


def _push(rnd, request=0, want_value=False):
    return Message(Kind.PUSH, key=5, seq=rnd, request=request,
                   flags=Flag.WANT_VALUE if want_value else Flag.NONE)


def test_the_replacement_gets_the_later_pushes_kept_then_the_requests_unanswered():
    replacement = _replacement(pushes=4)
    for rnd in (2, 3):
        replacement.keep(_push(rnd, want_value=True))
    waiting = Pending("value of key 5 after round 4", (5, 4))
    waiting.msg = _push(4, request=9, want_value=True)
    replacement.keep(waiting.msg)
    pull = Pending("optimizer states")
    pull.msg = Message(Kind.SAVE_STATES, request=10)
    replacement.requests.pending.update({9: waiting, 10: pull})
    replacement.moving = 8
    replacement.resend({5: 2})
    assert replacement.moving is None
    assert replacement.link.sent == [
        (1, Kind.PUSH, 5, 3, Flag.NONE),            # answered by the lost server
        (1, Kind.PUSH, 5, 4, Flag.WANT_VALUE),      # still awaited: its value comes
        (1, Kind.SAVE_STATES, 0, 0, Flag.NONE)]     # its round was not there: no PULL
    assert replacement.requests.aborted is None


def test_a_round_the_worker_no_longer_keeps_fails_every_request_naming_it():
    replacement = _replacement(pushes=3)
    for rnd in (1, 2, 3):
        replacement.keep(_push(rnd))
    replacement.forget_before(5, 2)             # round 1's value came: in every replica
    replacement.resend({5: 0})
    assert replacement.requests.aborted == ("worker rank 0: the replaced server lacks round 1 "
                                            "of key 5, which this worker no longer keeps")
    assert not replacement.requests.caused_by_other


def test_the_rejoin_line_groups_runs_of_keys_with_the_same_rounds():
    assert pushed_summary({0: 6, 1: 5}) == "key 0 6 round(s), key 1 5 round(s)"
    assert pushed_summary({k: 49 for k in range(30)}) == "keys 0-29 49 round(s) each"
    assert pushed_summary({3: 2, 0: 2, 1: 2, 5: 2, 6: 1}) == \
        "keys 0-1 2 round(s) each, key 3 2 round(s), key 5 2 round(s), key 6 1 round(s)"
    assert pushed_summary({}) == "nothing"


def test_resume_is_asked_again_until_answered_its_first_answer_lost():
    """A rejoined worker's first RESUME may reach its server before the scheduler told the
    server this process's address: that answer is lost, and RESUME is asked again."""
    replacement = _replacement(pushes=0)
    asked = []

    def ask(msg, what, expect, patience_s):
        asked.append((msg.kind, expect, patience_s))
        if len(asked) < 3:
            return None                     # went to the lost process's address
        return Message(Kind.RESUMED, meta={"pushed": [[5, 7]], "base": 0})

    assert replacement.resume(ask, rejoined=True) == (0, {5: 7})
    assert asked == [(Kind.RESUME, Kind.RESUMED, 2.0)] * 3


def test_resume_never_answered_fails_after_timeout_s_naming_the_server(monkeypatch):
    import pytest
    from netstorm.geoserver.worker import replacement as module
    from netstorm.geoserver.worker.settings import KVStoreError

    clock = [100.0]
    monkeypatch.setattr(module, "time", type("T", (), {"monotonic": lambda: clock[0]}))
    replacement = _replacement(pushes=0)         # timeout_s = 30
    patience = []

    def ask(msg, what, expect, patience_s):
        patience.append(patience_s)
        clock[0] += patience_s
        return None

    with pytest.raises(KVStoreError, match=r"worker rank 0: waited 30s for the rounds this "
                                           r"rank had pushed, from server of eu"):
        replacement.resume(ask, rejoined=True)
    assert sum(patience) == pytest.approx(30.0) and len(patience) == 15
