"""LinkProber: receiver-timed rates, bounded by a timeout, no clock agreement needed."""
from launching import needs_wan
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


@needs_wan
def test_startup_measurement_on_the_emulated_wan_finds_the_shaped_rates():
    """3 DCs at 20 Mbit/s each way, nothing declared: the cluster measures every direction
    (all flows at once, as training runs), builds its trees from that, and trains exactly."""
    import re
    import subprocess
    import sys

    from launching import REPO, WORKERS
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "launch.py"), "--wan", "small",
         "--bandwidth-scale", "0.5", "--policy", "fapt", "--measure", "--workers-per-dc", "1",
         "--", sys.executable, str(WORKERS / "fault_worker.py"), "loop", "3"],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:]
    line = next(l for l in proc.stdout.splitlines() if "measured link rates" in l)
    rates = [float(r) for r in re.findall(r"\w+->\w+ ([\d.]+)", line)]
    assert len(rates) == 6, line
    # shaped at 20, goodput ~96%. A flow whose sending server is descheduled on this loaded
    # 2-core host reads low (13.3 seen once in a full suite run, 18-19 alone); an unshaped
    # (hundreds) or mis-timed (double or half) measurement still fails
    assert all(12.0 < r < 22.0 for r in rates), line
    assert proc.stdout.count("finished 3 rounds") == 3
