"""netstorm.bench.systems: the cluster file a netstorm system runs with."""
import pytest

from netstorm.bench.systems import RunContext, cluster_config
from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.emulation import receive_delays
from netstorm.wan import load_topology
from netstorm.wan.routes import path_delays_ms


class Wan:
    """The emulated WAN's addresses, one per DC, as netstorm.wan gives them."""

    def __init__(self, dcs):
        self.address = {dc: f"10.99.{i}.1" for i, dc in enumerate(dcs)}

    def dc_address(self, dc):
        return self.address[dc]


def context(topology, latency, tmp_path):
    return RunContext(Wan(topology.dcs), topology, 1, [], tmp_path, None, latency=latency)


@pytest.mark.parametrize("latency", [True, False])
def test_latency_is_declared_for_planning_and_emulated_along_the_routes(tmp_path, latency):
    topology = load_topology("paper9")
    if not latency:
        topology = topology.without_latency()
    config = cluster_config(context(topology, latency, tmp_path), tmp_path, "fapt")
    path = tmp_path / "cluster.toml"
    path.write_text(to_toml(config))
    config = load_cluster(path)         # what the processes read
    assert [l.latency_ms for l in config.links] == [l.latency_ms for l in topology.links]
    hosts = {d.name: d.host for d in config.dcs}
    routes = path_delays_ms(topology)
    for dc in config.dcs:
        held = receive_delays(config.emulation, hosts, dc.host, ClusterFileError)
        assert held == ({hosts[a]: routes[(a, dc.name)] / 1e3 for a in hosts if a != dc.name}
                        if latency else {})
    scheduler = receive_delays(config.emulation, hosts, config.scheduler_host,
                               ClusterFileError)
    assert bool(scheduler) == latency       # the scheduler sits in the hub DC's namespace


def test_the_python_system_says_its_data_plane_in_the_cluster_file(tmp_path):
    topology = load_topology("small")
    config = cluster_config(context(topology, False, tmp_path), tmp_path, "fapt",
                            dataplane="python")
    path = tmp_path / "cluster.toml"
    path.write_text(to_toml(config))
    assert load_cluster(path).dataplane == "python"
    plain = cluster_config(context(topology, False, tmp_path), tmp_path, "fapt")
    assert plain.dataplane == "auto"
