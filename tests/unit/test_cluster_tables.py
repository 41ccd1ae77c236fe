"""netstorm.geoserver.config.cluster_tables: each table of a cluster file, read alone (the
whole file is tested through parse_cluster in test_cluster.py)."""
import pytest

from netstorm.geoserver.config.cluster_config import ClusterFileError
from netstorm.geoserver.config.cluster_tables import parse_dcs, parse_links, parse_recovery, \
    parse_timeouts, parse_transport, parse_wan
from netstorm.geoserver.config.links import Link


def test_links_become_link_values_between_declared_dcs():
    links = parse_links([{"a": "eu", "b": "us", "mbps": 40},
                         {"a": "us", "b": "asia", "mbps_ab": 20, "mbps_ba": 12.5,
                          "latency_ms": 35}], {"eu", "us", "asia"}, "f")
    assert links == (Link("eu", "us", 40.0, 40.0), Link("us", "asia", 20.0, 12.5, 35.0))
    with pytest.raises(ClusterFileError, match=r"f \[\[link\]\] #2: duplicate link us-eu"):
        parse_links([{"a": "eu", "b": "us", "mbps": 1}, {"a": "us", "b": "eu", "mbps": 1}],
                    {"eu", "us"}, "f")
    with pytest.raises(ClusterFileError, match="f: 'link' must be an array of tables"):
        parse_links({}, {"eu"}, "f")


def test_dcs_need_unique_names_and_a_worker():
    dcs = parse_dcs([{"name": "eu", "host": "127.0.0.1", "server_port": 0, "workers": 2}], "f")
    assert [(d.name, d.workers, d.server_host) for d in dcs] == [("eu", 2, "127.0.0.1")]
    with pytest.raises(ClusterFileError, match=r"f: no \[\[dc\]\] tables"):
        parse_dcs([], "f")
    with pytest.raises(ClusterFileError, match="f DC 'eu': workers must be a whole number in "
                                               "1..65533, got 0"):
        parse_dcs([{"name": "eu", "host": "127.0.0.1", "server_port": 0, "workers": 0}], "f")


def test_each_table_returns_only_the_fields_it_sets():
    assert parse_transport({}, "t") == {} and parse_timeouts({}, "t") == {}
    assert parse_transport({"fuse_bytes": 0, "timeout_s": 3}, "t") == {"fuse_bytes": 0}
    assert parse_timeouts({"fuse_bytes": 0, "timeout_s": 3}, "t") == {"timeout_s": 3.0}
    assert parse_wan({"policy": "fapt", "hub": "eu"}, {"eu"}, "w") == \
        {"policy": "fapt", "hub": "eu"}
    assert parse_recovery({"server_restarts": 2}, "r") == {"server_restarts": 2}
    assert parse_recovery({"scheduler_restarts": 1}, "r") == {"scheduler_restarts": 1}
    with pytest.raises(ClusterFileError, match="w: hub 'us' is not a declared DC"):
        parse_wan({"hub": "us"}, {"eu"}, "w")
    with pytest.raises(ClusterFileError, match="r: worker_restarts must be a whole number in "
                                               "0..100, got 101"):
        parse_recovery({"worker_restarts": 101}, "r")


def test_max_idle_is_a_duration_or_zero_for_never():
    assert parse_timeouts({"max_idle_s": 0}, "t") == {"max_idle_s": 0.0}
    assert parse_timeouts({"max_idle_s": 600}, "t") == {"max_idle_s": 600.0}
    with pytest.raises(ClusterFileError, match=r"t: max_idle_s must be a finite number in "
                                               r"\[0, 86400\] s, got -1.0 \(0: never\)"):
        parse_timeouts({"max_idle_s": -1}, "t")


def test_detect_floor_is_a_duration_or_zero_for_the_old_rule():
    assert parse_timeouts({"detect_floor_s": 0}, "t") == {"detect_floor_s": 0.0}
    assert parse_timeouts({"detect_floor_s": 0.5}, "t") == {"detect_floor_s": 0.5}
    with pytest.raises(ClusterFileError, match=r"t: detect_floor_s must be a finite number in "
                                               r"\[0, 86400\] s, got -1.0 \(0: a silent node "
                                               r"is presumed dead after dead_after_s\)"):
        parse_timeouts({"detect_floor_s": -1}, "t")
