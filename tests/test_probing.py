"""netstorm.geoserver.server.probing: a PROBE_REQUEST streams pieces to every other DC at
once; once every peer's pieces arrived (or the request timed out) the inbound rates go to
the scheduler, once; a malformed request stops the server naming the field."""
import pytest

from netstorm.geoserver.core.postoffice import AbortError
from netstorm.geoserver.core.wire import Kind, Message
from netstorm.geoserver.server.probing import Probing
from netstorm.geoserver.server.wan.probe import PIECES


class Wan:
    def __init__(self):
        self.sent, self.passive = [], []

    def send(self, dc, msg):
        self.sent.append((dc, msg))

    def on_probe(self, source, msg, now):
        self.passive.append(source)


class Po:
    def __init__(self):
        self.to_scheduler = []

    def send_scheduler(self, msg):
        self.to_scheduler.append(msg)


def test_pieces_go_to_every_peer_and_the_rates_are_reported_once_all_came():
    wan, po = Wan(), Po()
    probing = Probing("eu", ["us", "asia"], wan, po)
    probing.on_request(Message(Kind.PROBE_REQUEST, meta={"probe_bytes": 1024,
                                                          "timeout_s": 60.0}))
    assert len(wan.sent) == 2 * PIECES and {dc for dc, _ in wan.sent} == {"us", "asia"}
    piece = wan.sent[0][1]
    for source in ("us", "asia"):
        for _ in range(PIECES):
            assert po.to_scheduler == []
            probing.on_piece(source, piece)
    (report,) = po.to_scheduler
    assert report.kind == Kind.PROBE_REPORT and set(report.meta["rates"]) == {"us", "asia"}
    assert len(wan.passive) == 2 * PIECES           # the passive measurement saw them too
    probing.maybe_report()
    assert len(po.to_scheduler) == 1


def test_a_malformed_request_stops_the_server_naming_the_field():
    with pytest.raises(AbortError, match="bad PROBE_REQUEST from the scheduler: .*probe_bytes"):
        Probing("eu", ["us"], Wan(), Po()).on_request(
            Message(Kind.PROBE_REQUEST, meta={"probe_bytes": -1}))
