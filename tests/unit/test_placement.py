"""netstorm/launcher/placement.py: which process runs on which host."""
import tomllib

from netstorm.geoserver.config.cluster import parse_cluster
from netstorm.launcher import placement
from netstorm.launcher.placement import Part

FILE = """
[scheduler]
host = "10.0.0.9"
port = 9000
[[dc]]
name = "eu"
host = "10.0.0.1"
server_port = 9100
workers = 3
worker_hosts = ["10.0.0.2", "10.0.0.3"]
[[dc]]
name = "us"
host = "0.0.0.0"
advertise = "10.0.1.1"
server_port = 9100
workers = 1
"""


def config():
    return parse_cluster(tomllib.loads(FILE))


def test_every_process_is_placed_on_exactly_one_host():
    c = config()
    hosts = placement.hosts(c)
    assert hosts == ["10.0.0.9", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.1"]
    parts = [placement.on_host(c, h) for h in hosts]
    assert sum(p.scheduler for p in parts) == 1
    assert sorted(s for p in parts for s in p.servers) == ["eu", "us"]
    workers = sorted(w for p in parts for w in p.workers)
    assert workers == sorted(placement.whole(c).workers) == \
        [("eu", 0), ("eu", 1), ("eu", 2), ("us", 0)]


def test_workers_take_their_dc_hosts_in_turn_and_a_wildcard_server_its_advertised_one():
    c = config()
    assert placement.on_host(c, "10.0.0.2") == Part(False, (), (("eu", 0), ("eu", 2)))
    assert placement.on_host(c, "10.0.0.3") == Part(False, (), (("eu", 1),))
    assert placement.on_host(c, "10.0.1.1") == Part(False, ("us",), (("us", 0),))
    assert placement.on_host(c, "10.0.0.9") == Part(True)
    assert placement.on_host(c, "10.9.9.9").empty


def test_of_dcs_and_descriptions():
    c = config()
    part = placement.of_dcs(c, ["us"], False)
    assert part == Part(False, ("us",), (("us", 0),))
    assert part.describe() == "server us, worker us/0"
    assert placement.whole(c).describe() == \
        "scheduler, server eu, server us, workers eu/0 eu/1 eu/2 us/0"
    assert placement.whole(c).count() == "2 DC(s), 4 worker(s)"
    assert Part(False).describe() == "nothing"
