"""netstorm.geoserver.config.cluster_config: the cluster as typed data (settings that
contradict each other are refused on construction; a DC looked up by name)."""
import pytest

from netstorm.geoserver.config.cluster import ClusterFileError, parse_cluster, pseudo_cluster


def test_contradicting_settings_are_refused_also_when_built_in_code():
    with pytest.raises(ClusterFileError, match="<pseudo>: dead_after_s = 0.5 is below two "
                                               "heartbeats"):
        pseudo_cluster(2, 1, 9123, heartbeat_s=0.5, dead_after_s=0.5)
    assert pseudo_cluster(2, 1, 9123, heartbeat_s=0.5, dead_after_s=1.0).dead_after_s == 1.0


def test_unknown_dc_lookup_names_the_choices():
    c = parse_cluster({"scheduler": {"host": "127.0.0.1", "port": 1},
                       "dc": [{"name": "a", "host": "127.0.0.1", "server_port": 0,
                               "workers": 1}]})
    with pytest.raises(ClusterFileError, match=r"no DC named 'b'; DCs are \['a'\]"):
        c.dc("b")


def test_max_idle_below_two_heartbeats_is_refused_and_zero_means_never():
    with pytest.raises(ClusterFileError, match="<pseudo>: max_idle_s = 0.5 is below two "
                                               "heartbeats"):
        pseudo_cluster(2, 1, 9123, heartbeat_s=0.5, max_idle_s=0.5)
    assert pseudo_cluster(2, 1, 9123).max_idle_s == 0.0     # the default: never
