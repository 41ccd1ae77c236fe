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


def test_every_process_binds_the_address_its_field_gives():
    c = config()
    binds = placement.binds(c, placement.whole(c))
    assert [(b.process, b.field, b.address) for b in binds] == [
        ("scheduler", "[scheduler] host", "10.0.0.9"),
        ("server eu", "DC eu's host", "10.0.0.1"),
        ("server us", "DC us's host", "0.0.0.0"),
        ("worker eu/0", "DC eu's worker_hosts", "10.0.0.2"),
        ("worker eu/1", "DC eu's worker_hosts", "10.0.0.3"),
        ("worker eu/2", "DC eu's worker_hosts", "10.0.0.2"),
        ("worker us/0", "DC us's advertise", "10.0.1.1")]


def test_misplaced_names_what_binds_another_machine_s_address_asking_once_per_address():
    c = config()
    asked = []

    def is_local(address):
        asked.append(address)
        return address in ("10.0.0.9", "10.0.0.1", "10.0.0.2")
    wrong = placement.misplaced(c, placement.whole(c), is_local)
    assert [(b.process, b.address) for b in wrong] == [("worker eu/1", "10.0.0.3"),
                                                        ("worker us/0", "10.0.1.1")]
    assert sorted(asked) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.9", "10.0.1.1"]
    assert placement.misplaced(c, placement.on_host(c, "10.0.0.2"), is_local) == []
