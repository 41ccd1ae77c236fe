"""LinkProber: receiver-timed rates, bounded by a timeout, no clock agreement needed."""

from netstorm.geoserver.server.wan.probe import PIECES, LinkProber


def test_rate_is_bytes_after_the_first_piece_over_receiver_time():
    p = LinkProber(peers=("a", "b"))
    p.on_piece("b", 500_000, 200.0)         # b's first piece beats this DC's own request
    assert not p.done(100.0)                # not started: never done
    p.start(100.0, 5.0)
    for i in range(PIECES):                 # a: 1 MB pieces, one every 0.1 s -> 80 Mbit/s
        p.on_piece("a", 1_000_000, 100.0 + 0.1 * i)
    assert not p.done(101.0)                # b has not finished
    for i in range(1, PIECES):
        p.on_piece("b", 500_000, 200.0 + 0.5 * i)   # another clock offset: irrelevant
    assert p.done(101.0)
    rates = p.rates_mbps()
    assert abs(rates["a"] - 80.0) < 1e-6 and abs(rates["b"] - 8.0) < 1e-6


def test_timeout_ends_the_measurement_and_silent_peers_read_zero():
    p = LinkProber(peers=("a", "b"))
    p.start(0.0, 2.0)
    p.on_piece("a", 1000, 0.5)
    p.on_piece("a", 1000, 1.5)
    assert not p.done(1.9) and p.done(2.0)
    assert p.rates_mbps() == {"a": 8 * 1000 / 1.0 / 1e6, "b": 0.0}


def test_pieces_cover_the_probe():
    pieces = LinkProber.pieces(2 << 20)
    assert len(pieces) == PIECES and sum(p.nbytes for p in pieces) == 2 << 20
