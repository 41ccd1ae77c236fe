"""config/metrics.py: the ``[metrics]`` table, its port setting (also ``--metrics-port``)
and the hosts whose processes its range cannot all serve; read by parse_cluster and
written back by to_toml."""
from __future__ import annotations

import tomllib

import pytest

from netstorm.geoserver.config.cluster import ClusterConfig, ClusterFileError, load_cluster, parse_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.metrics import MetricsConfig, MetricsError, parse_port
from netstorm.launcher.cli import parse_args

BASE = ('[scheduler]\nhost = "127.0.0.1"\nport = 9000\n'            # one process a host
        '[[dc]]\nname = "eu"\nhost = "127.0.0.2"\nserver_port = 0\nworkers = 1\n'
        '[[dc]]\nname = "us"\nhost = "127.0.0.3"\nserver_port = 0\nworkers = 1\n')


def cluster(metrics: str) -> ClusterConfig:
    return parse_cluster(tomllib.loads(BASE + metrics), "c.toml")


@pytest.mark.parametrize("text,ports", [(0, (0, 0)), ("0", (0, 0)), (9400, (9400, 9400)),
                                        ("9400-9409", (9400, 9409)),
                                        (" 9400 - 9401 ", (9400, 9401))])
def test_port_settings(text, ports):
    assert parse_port(text, "[metrics] port") == ports


@pytest.mark.parametrize("text,message", [
    ("x", "must be a port, 0 (any free port) or a range"),
    (True, "must be a port"), (70000, "port 70000 is outside 1..65535"),
    ("0-10", "port 0 is outside"), ("9409-9400", "9409 is above 9400")])
def test_bad_port_settings_name_the_field(text, message):
    with pytest.raises(MetricsError, match=r"^\[metrics\] port: ") as raised:
        parse_port(text, "[metrics] port")
    assert message in str(raised.value)
    with pytest.raises(MetricsError, match=r"^(must|'|True|70000)"):     # a flag's: argparse
        parse_port(text)                                                # names the flag


def test_off_unless_the_table_is_there():
    assert cluster("").metrics == MetricsConfig()
    assert not cluster("").metrics.on


def test_the_table_defaults_to_loopback_and_any_free_port():
    metrics = cluster("[metrics]\n").metrics
    assert metrics == MetricsConfig(on=True, host="127.0.0.1", ports=(0, 0))


@pytest.mark.parametrize("table,message", [
    ('[metrics]\nprot = 1\n', "c.toml [metrics]: unknown field 'prot'"),
    ('[metrics]\nhost = 5\n', "c.toml [metrics]: field 'host' must be str"),
    ('[metrics]\nport = "a-b"\n', "c.toml [metrics] port: must be a port"),
    ('[metrics]\ntargets_dir = 1\n', "c.toml [metrics]: field 'targets_dir' must be str")])
def test_a_bad_table_is_a_cluster_file_error_naming_file_and_field(table, message):
    with pytest.raises(ClusterFileError, match=message.replace("[", r"\[").replace("]", r"\]")):
        cluster(table)


def test_metrics_must_be_a_table():
    with pytest.raises(ClusterFileError, match=r"c\.toml \[metrics\]: must be a table"):
        parse_cluster(tomllib.loads("metrics = 1\n" + BASE), "c.toml")


def test_a_range_too_small_for_a_host_s_processes_is_refused_naming_them():
    shared = ('[scheduler]\nhost = "127.0.0.1"\nport = 9000\n'
              '[[dc]]\nname = "eu"\nhost = "127.0.0.1"\nserver_port = 0\nworkers = 1\n')
    with pytest.raises(ClusterFileError, match=r"\[metrics\] port 9400 holds 1 port\(s\), "
                       r"but 127\.0\.0\.1 runs 2 processes that serve metrics \(the "
                       r"scheduler, the server of 'eu'\)"):
        parse_cluster(tomllib.loads(shared + '[metrics]\nport = 9400\n'), "c.toml")
    # one process a host: one port serves them all
    assert cluster('[metrics]\nport = 9400\n').metrics.ports == (9400, 9400)
    assert cluster('[metrics]\nport = 0\n').metrics.any_port


def test_written_back_and_read_equal(tmp_path):
    config = cluster('[metrics]\nhost = "0.0.0.0"\nport = "9400-9403"\n'
                     'targets_dir = "/srv/targets"\n')
    text = to_toml(config)
    assert parse_cluster(tomllib.loads(text), "again").metrics == config.metrics
    assert "[metrics]" not in to_toml(cluster(""))


def test_targets_dir_is_relative_to_the_cluster_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(BASE + '[metrics]\ntargets_dir = "targets"\n')
    assert load_cluster(path).metrics.targets_dir == str(tmp_path / "targets")


def test_the_launcher_flag_is_checked_as_the_field():
    assert parse_args(["--dcs", "2", "--metrics-port", "9400-9401", "--", "true"]).metrics_port == \
        (9400, 9401)
    with pytest.raises(SystemExit):
        parse_args(["--dcs", "2", "--metrics-port", "nine", "--", "true"])
