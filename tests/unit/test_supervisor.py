"""netstorm/launcher/supervisor.py's pure parts: a launch refuses, before it starts anything,
a share of the cluster placed on another machine's addresses, naming each process, the DC's
field and the address (whether an address is this machine's is asked of a stand-in)."""
import tomllib

import pytest

from netstorm.geoserver.config.cluster import ClusterFileError, parse_cluster
from netstorm.launcher import placement
from netstorm.launcher.supervisor import refuse_misplaced

FILE = """
[scheduler]
host = "127.0.0.1"
port = 9000
[[dc]]
name = "eu"
host = "127.0.0.1"
server_port = 9100
workers = 2
worker_hosts = ["127.0.0.1", "10.9.9.9"]
[[dc]]
name = "us"
host = "0.0.0.0"
advertise = "127.0.0.1"
server_port = 9101
workers = 1
"""


def is_local(address):
    return address.startswith("127.")


def test_a_whole_cluster_launch_refuses_a_worker_on_another_machine_saying_what_to_do():
    c = parse_cluster(tomllib.loads(FILE), source="c.toml")
    with pytest.raises(ClusterFileError) as caught:
        refuse_misplaced(c, placement.whole(c), is_local)
    text = str(caught.value)
    assert text.startswith("c.toml places worker eu/1 on 10.9.9.9 (DC eu's worker_hosts), "
                           "not an address of this machine; without --host, --dc or --ssh"), \
        text
    assert "--host ADDRESS" in text and "--ssh" in text


def test_a_share_on_local_or_wildcard_addresses_passes_and_a_dc_s_share_is_told_apart():
    c = parse_cluster(tomllib.loads(FILE), source="c.toml")
    refuse_misplaced(c, placement.of_dcs(c, ["us"], True), is_local)    # nothing raised
    with pytest.raises(ClusterFileError, match="run this launcher on the machine that has"):
        refuse_misplaced(c, placement.of_dcs(c, ["eu"], False), is_local)


def test_many_misplaced_processes_are_counted_not_all_listed():
    c = parse_cluster(tomllib.loads(FILE.replace('"127.0.0.1", "10.9.9.9"', '"10.9.9.8"')
                                    .replace("workers = 2", "workers = 6")), source="c.toml")
    with pytest.raises(ClusterFileError, match=r"worker eu/3 on 10\.9\.9\.8 .*; and 2 more"):
        refuse_misplaced(c, placement.whole(c), is_local)


def test_an_address_is_local_if_loopback_wildcard_or_an_interface_s(monkeypatch):
    from collections import namedtuple

    import psutil

    from netstorm.launcher.supervisor import is_local_address
    entry = namedtuple("entry", "address")
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {
        "eth0": [entry("10.0.0.5"), entry("fe80::1%eth0"), entry("02:fc:00:00:00:01")]})
    assert all(map(is_local_address, ["127.0.0.1", "127.0.0.9", "::1", "0.0.0.0", "::",
                                      "10.0.0.5", "fe80::1", "fe80:0::1"]))
    assert not any(map(is_local_address, ["10.0.0.6", "198.51.100.7", "fd00::2"]))
