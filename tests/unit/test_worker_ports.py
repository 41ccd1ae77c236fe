"""config/ports.py and the worker's side: a DC's worker_ports, worker_advertise and
bulk_port in a cluster file, how they reach the workers (the launcher's environment, the
worker's settings) and the TOML handed to processes."""

import copy
import tomllib

import pytest

from netstorm.geoserver.config.cluster import ClusterFileError, parse_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.worker.settings import KVStoreError, WorkerSettings
from netstorm.launcher.supervisor import worker_env

BASE = {"scheduler": {"host": "10.0.0.1", "port": 9000},
        "dc": [{"name": "eu", "host": "10.0.0.1", "server_port": 9100, "workers": 4,
                "worker_hosts": ["10.0.0.2", "10.0.0.3"], "worker_ports": "40000-40001"},
               {"name": "us", "host": "10.1.0.1", "server_port": 9100, "bulk_port": 9101,
                "workers": 2, "worker_ports": "40000-40099"}],
        "security": {"curve": False}}


def cluster(**changes):
    """BASE with ``changes`` to DC eu (a value of None removes the field)."""
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            data["dc"][0].pop(key, None)
        else:
            data["dc"][0][key] = value
    return parse_cluster(data, "c.toml")


def refused(match: str, data=None, **changes) -> str:
    with pytest.raises(ClusterFileError, match=match) as caught:
        parse_cluster(data, "c.toml") if data is not None else cluster(**changes)
    assert str(caught.value).startswith("c.toml")
    return str(caught.value)


def test_fields_are_read_and_default_to_any_free_port():
    config = cluster()
    eu, us = config.dcs
    assert eu.worker_ports == (40000, 40001) and us.worker_ports == (40000, 40099)
    assert (eu.bulk_port, us.bulk_port) == (0, 9101)
    assert eu.worker_advertise == ()
    assert cluster(workers=2, worker_ports="40005").dcs[0].worker_ports == (40005, 40005)
    bare = cluster(worker_ports=None).dcs[0]
    assert bare.worker_ports == () and bare.bulk_port == 0


@pytest.mark.parametrize("value, match", [
    ("forty", "worker_ports must be a port range \"LOW-HIGH\""),
    ("40000-", "must be a port range"),
    ("0-10", "port 0 is outside 1..65535"),
    ("65000-70000", "port 70000 is outside 1..65535"),
    ("40100-40000", "40100 is above 40000"),
    ("40000", "holds 1 port\\(s\\), but a host runs 2 of this DC's workers"),
    (40000, "field 'worker_ports' must be str"),
])
def test_bad_worker_ports_name_the_dc_and_the_field(value, match):
    text = refused(match, worker_ports=value)
    assert "DC 'eu'" in text


def test_a_range_needs_one_port_per_worker_of_its_busiest_host():
    cluster(workers=3, worker_hosts=["10.0.0.2", "10.0.0.3", "10.0.0.4"], worker_ports="40000")
    refused("holds 2 port\\(s\\), but a host runs 3", workers=3, worker_hosts=None,
            worker_ports="40000-40001")


def test_worker_advertise_one_address_or_one_per_worker_host():
    eu = cluster(worker_advertise=["198.51.100.2", "198.51.100.3"]).dcs[0]
    assert [eu.worker_bind(i) for i in range(4)] == ["10.0.0.2", "10.0.0.3"] * 2
    assert [eu.worker_host(i) for i in range(4)] == ["198.51.100.2", "198.51.100.3"] * 2
    refused("worker_advertise gives 1 address\\(es\\) for 2 worker host\\(s\\)",
            worker_advertise="198.51.100.2")
    refused("worker_advertise must be a host address or a list", worker_advertise=[1, 2])
    # without worker_hosts: the workers bind what the server binds, reached at the address
    nat = cluster(host="0.0.0.0", advertise="198.51.100.1", worker_hosts=None,
                  worker_ports=None, worker_advertise="198.51.100.1").dcs[0]
    assert (nat.worker_bind(0), nat.worker_host(0)) == ("0.0.0.0", "198.51.100.1")
    plain = cluster(worker_hosts=None, worker_ports=None).dcs[0]    # as before
    assert (plain.worker_bind(0), plain.worker_host(0)) == ("10.0.0.1", "10.0.0.1")


def test_a_wildcard_worker_host_needs_an_advertised_address():
    refused("worker host '0.0.0.0' binds every interface: give worker_advertise",
            worker_hosts=["0.0.0.0", "10.0.0.3"])
    eu = cluster(worker_hosts=["0.0.0.0", "10.0.0.3"],
                 worker_advertise=["198.51.100.2", "10.0.0.3"]).dcs[0]
    assert eu.worker_bind(0) == "0.0.0.0" and eu.worker_host(0) == "198.51.100.2"
    refused("worker_advertise '0.0.0.0' is not an address peers can reach",
            worker_advertise=["0.0.0.0", "10.0.0.3"])


def test_bulk_port_is_a_port_of_its_own():
    refused("bulk_port must be a whole number in 0..65535, got 70000", bulk_port=70000)
    refused("two processes are given the same host and port", bulk_port=9100)
    refused("two processes are given the same host and port", bulk_port=9000)


def test_ranges_on_one_host_stay_apart_from_each_other_and_from_fixed_ports():
    data = copy.deepcopy(BASE)
    data["dc"][1]["worker_hosts"] = ["10.0.0.2"]        # us's workers beside eu's
    text = refused("DC 'eu' and DC 'us' both run workers on 10.0.0.2 with overlapping "
                   "worker_ports", data)
    assert "40000-40001, 40000-40099" in text
    data["dc"][1]["worker_ports"] = "40002-40003"
    parse_cluster(data, "c.toml")
    # a range holding a port the server or the scheduler binds on that host
    refused("worker_ports 9000-9200 holds port 9000, which the scheduler binds on 10.0.0.1",
            worker_hosts=None, worker_ports="9000-9200")
    refused("holds port 9101, which the server of 'us' \\(bulk_port\\) binds",
            data=dict(copy.deepcopy(BASE), dc=[BASE["dc"][0], dict(
                BASE["dc"][1], worker_ports="9101-9102")]))


def test_the_toml_handed_to_processes_keeps_the_fields():
    config = cluster(worker_advertise=["198.51.100.2", "198.51.100.3"])
    again = parse_cluster(tomllib.loads(to_toml(config)), "c.toml")
    assert again == config and again.dcs[1].bulk_port == 9101


def test_a_worker_is_told_its_bind_address_advertised_address_and_ports():
    config = cluster(worker_advertise=["198.51.100.2", "198.51.100.3"])
    env = worker_env(config, config.dcs[0], 1)
    assert (env["NETSTORM_HOST"], env["NETSTORM_ADVERTISE"]) == ("10.0.0.3", "198.51.100.3")
    assert env["NETSTORM_WORKER_PORTS"] == "40000-40001"
    settings = WorkerSettings.from_env({**env, "NETSTORM_DC": "eu"})
    assert settings.port_range() == (40000, 40001) and settings.advertise == "198.51.100.3"
    any_port = cluster(worker_ports=None)
    free = worker_env(any_port, any_port.dcs[0], 0)
    assert free["NETSTORM_WORKER_PORTS"] == ""
    assert WorkerSettings.from_env(free).port_range() == ()


@pytest.mark.parametrize("value", ["x", "0-3", "5-4", "70000"])
def test_a_bad_port_variable_is_a_clear_worker_error(value):
    settings = WorkerSettings(scheduler="tcp://10.0.0.1:9000", dc="eu", ports=value)
    with pytest.raises(KVStoreError, match="NETSTORM_WORKER_PORTS=.* is not a port range"):
        settings.port_range()
