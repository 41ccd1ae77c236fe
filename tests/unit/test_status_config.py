"""The cluster file's [status] table (geoserver/config/status.py, read by
config/cluster_tables.py, written back by config/cluster_toml.py) and the launcher's
--status-port / --total-steps (netstorm/launcher/cli.py), which set it."""
import tomllib

import pytest

from netstorm.geoserver.config.cluster import ClusterFileError, parse_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.status import StatusConfig
from netstorm.launcher import cli

BASE = {"scheduler": {"host": "127.0.0.1", "port": 9000},
        "dc": [{"name": "eu", "host": "127.0.0.1", "server_port": 0, "workers": 1}]}


def parsed(status: dict):
    return parse_cluster({**BASE, "status": status}, source="c.toml")


def test_no_status_table_means_no_status_page():
    config = parse_cluster(BASE, source="c.toml")
    assert config.status == StatusConfig() and not config.status.on
    assert "status" not in tomllib.loads(to_toml(config))


def test_the_table_sets_port_host_total_steps_and_samples_per_step():
    config = parsed({"port": 8080, "host": "0.0.0.0", "total_steps": 5000,
                     "samples_per_step": 256})
    assert config.status == StatusConfig(8080, "0.0.0.0", 5000, 256) and config.status.on
    assert config.status.reached_at("10.0.0.7") == "10.0.0.7"     # a wildcard: the scheduler's
    assert parsed({"port": 8080}).status.host == "127.0.0.1"      # loopback unless given
    assert parsed({"port": 8080, "host": "localhost"}).status.reached_at("10.0.0.7") == \
        "127.0.0.1"


@pytest.mark.parametrize("status, named", [
    ({"prot": 8080}, "c.toml [status]: unknown field 'prot'; did you mean 'port'?"),
    ({"port": 0}, "c.toml [status]: port must be a whole number in 1..65535, got 0"),
    ({"port": 70000}, "port must be a whole number in 1..65535, got 70000"),
    ({"port": "8080"}, "c.toml [status]: field 'port' must be int, got '8080'"),
    ({"port": 8080, "total_steps": 0}, "c.toml [status]: total_steps must be a whole number"),
    ({"port": 8080, "samples_per_step": -1}, "[status]: samples_per_step must be"),
    ({"port": 8080, "host": "no such host!"}, "c.toml [status]: host 'no such host!' is "
                                              "neither an IP address nor a host name"),
    ([1], "c.toml [status]: must be a table")])
def test_a_bad_status_table_is_refused_naming_the_file_and_field(status, named):
    with pytest.raises(ClusterFileError) as caught:
        parsed(status)
    assert named in str(caught.value)


def test_the_status_table_is_written_back_as_read():
    config = parsed({"port": 8080, "host": "0.0.0.0", "total_steps": 7})
    text = to_toml(config)
    assert tomllib.loads(text)["status"] == {"port": 8080, "host": "0.0.0.0", "total_steps": 7}
    assert parse_cluster(tomllib.loads(text), source="again").status == config.status


def test_flags_override_the_files_port_and_total_steps_and_keep_its_host():
    status = StatusConfig(8080, "0.0.0.0", 10, 4)
    assert status.overridden(port=9090) == StatusConfig(9090, "0.0.0.0", 10, 4)
    assert status.overridden(total_steps=99) == StatusConfig(8080, "0.0.0.0", 99, 4)
    assert status.overridden() == status


@pytest.fixture
def launched(monkeypatch):
    """cli.main as far as the cluster it would start (no process, no socket)."""
    started = []
    monkeypatch.setattr(cli, "free_port", lambda: 9000)
    monkeypatch.setattr(cli, "run_cluster", lambda config, *a, **k: started.append(config) or 0)
    return started


def test_status_port_and_total_steps_set_the_pseudo_clusters_status(launched):
    assert cli.main(["--dcs", "2", "--status-port", "8181", "--total-steps", "300", "--",
                     "true"]) == 0
    assert launched[0].status == StatusConfig(port=8181, total_steps=300)


def test_status_port_over_a_file_keeps_the_files_status_host(launched, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(to_toml(parsed({"port": 8080, "host": "0.0.0.0", "total_steps": 5})))
    assert cli.main(["--cluster", str(path), "--status-port", "8282", "--", "true"]) == 0
    assert launched[0].status == StatusConfig(port=8282, host="0.0.0.0", total_steps=5)


@pytest.mark.parametrize("flags, named", [
    (["--status-port", "0"], "--status-port: must be a whole number in 1..65535, got 0"),
    (["--status-port", "http"], "--status-port: must be a whole number in 1..65535, got 'http'"),
    (["--total-steps", "0"], "--total-steps: must be a whole number in 1..")])
def test_a_bad_status_flag_is_refused_naming_it(launched, capsys, flags, named):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--dcs", "2", *flags, "--", "true"])
    assert stopped.value.code == 2 and named in capsys.readouterr().err and not launched
