"""netstorm.geoserver.config.links: the one link type, of the cluster file and of the
scheduler's topology."""
import pytest

from netstorm.geoserver.config.cluster import parse_cluster
from netstorm.geoserver.config.links import Link
from netstorm.scheduler.policy import cluster_topology
from netstorm.scheduler.topology import Link as TopologyLink


def test_rate_is_per_direction_and_only_between_the_link_ends():
    link = Link("eu", "us", 100.0, 40.0, latency_ms=30.0)
    assert link.rate("eu", "us") == 100.0 and link.rate("us", "eu") == 40.0
    with pytest.raises(KeyError, match="link eu-us does not join eu -> asia"):
        link.rate("eu", "asia")


def test_the_cluster_files_links_are_the_topologys_links_unconverted():
    assert TopologyLink is Link
    config = parse_cluster({
        "scheduler": {"host": "127.0.0.1", "port": 1},
        "dc": [{"name": n, "host": "127.0.0.1", "server_port": 0, "workers": 1}
               for n in ("eu", "us")],
        "link": [{"a": "eu", "b": "us", "mbps_ab": 100, "mbps_ba": 40, "latency_ms": 30}]})
    assert config.links == (Link("eu", "us", 100.0, 40.0, 30.0),)
    topology = cluster_topology(config)
    assert topology.links == config.links and topology.rate("us", "eu") == 40.0
