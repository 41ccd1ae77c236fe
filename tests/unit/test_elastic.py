"""geoserver/config/elastic.py and the [elastic] table: min_dcs checked against the cluster,
the launcher's --dcs MIN:MAX, the table written back for the processes."""
import pytest

from netstorm.geoserver.config.cluster import ClusterFileError, parse_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.elastic import DcsRangeError, elastic_problem, parse_dcs_range
from netstorm.geoserver.config.settings import RuntimeSettings
from netstorm.geoserver.config.sync import SyncConfig
from netstorm.launcher.cli import _overrides, parse_args


def _file(**elastic):
    return {"scheduler": {"host": "127.0.0.1", "port": 9000}, "elastic": elastic,
            "dc": [{"name": n, "host": "127.0.0.1", "server_port": 9001 + i, "workers": 1}
                   for i, n in enumerate(("eu", "us", "ap"))]}


def test_min_dcs_is_read_checked_and_written_back_for_the_processes():
    config = parse_cluster(_file(min_dcs=2), "c.toml")
    assert config.min_dcs == 2 and RuntimeSettings.from_cluster(config).min_dcs == 2
    assert "[elastic]\nmin_dcs = 2" in to_toml(config)
    assert parse_cluster(_file(), "c.toml").min_dcs == 0
    assert "[elastic]" not in to_toml(parse_cluster(_file(), "c.toml"))
    with pytest.raises(ClusterFileError, match=r"c.toml: \[elastic\] min_dcs = 4 is more than "
                                               r"the 3 DC\(s\)"):
        parse_cluster(_file(min_dcs=4), "c.toml")
    with pytest.raises(ClusterFileError, match=r"c.toml \[elastic\]: min_dcs must be"):
        parse_cluster(_file(min_dcs=0), "c.toml")
    with pytest.raises(ClusterFileError, match=r"c.toml \[elastic\].*'max_dcs'"):
        parse_cluster(_file(max_dcs=3), "c.toml")


def test_elastic_runs_share_the_server_replacement_s_limits():
    def sync(mode, **params):
        return SyncConfig.from_params({"mode": mode, **params}, where="test")
    assert elastic_problem(0, 3, sync("hfa", k2=2), True, True) == ""      # not elastic
    for accepted in (sync("fsa"), sync("diloco", h=5), sync("hfa", k1=2)):
        assert elastic_problem(2, 3, accepted, False) == "", accepted
    assert "needs [sync] mode 'fsa', 'diloco' or 'hfa': under 'esync'" in \
        elastic_problem(2, 3, sync("esync"), False)
    assert "needs [sync] k2 = 1 under 'hfa' (got 2)" in \
        elastic_problem(2, 3, sync("hfa", k2=2), False)
    assert "[sync] quorum" in elastic_problem(2, 3, sync("diloco", quorum=2), False)
    assert "[compression]" in elastic_problem(2, 3, sync("diloco"), True)
    assert "[wan] adapt" in elastic_problem(2, 3, sync("fsa"), False, adapt=True)


def test_dcs_takes_a_count_or_a_range_and_the_range_makes_the_pseudo_cluster_elastic():
    assert parse_dcs_range("3") == (3, 3) and parse_dcs_range("2:5") == (2, 5)
    for bad in ("0:2", "3:2", "a", "1:2:3", ":2", "-1"):
        with pytest.raises(DcsRangeError):
            parse_dcs_range(bad)
    args = parse_args(["--dcs", "2:3", "--", "python", "t.py"])
    assert (args.dcs, args.min_dcs) == (3, 2) and _overrides(args)["min_dcs"] == 2
    args = parse_args(["--dcs", "3", "--", "python", "t.py"])
    assert (args.dcs, args.min_dcs) == (3, None) and "min_dcs" not in _overrides(args)


def test_a_bad_dcs_range_is_refused_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--dcs", "3:2", "--", "python", "t.py"])
    assert "--dcs" in capsys.readouterr().err


def test_join_is_for_a_whole_local_cluster_and_an_elastic_one(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--cluster", "c.toml", "--join", "dc2", "--ssh", "--", "python", "t.py"])
    assert "--join starts DCs of a cluster this launcher runs whole" in capsys.readouterr().err
    args = parse_args(["--dcs", "2:3", "--join", "dc2", "--join-after", "1.5",
                       "--join-when", "go", "--", "python", "t.py"])
    assert (args.join, args.join_after, args.join_when) == (["dc2"], 1.5, "go")
