"""launcher_keygen: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_launcher_keygen.py."""

import pytest
from launching import free_port
from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster, pseudo_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.launcher.supervisor import with_keys, worker_env


def test_whole_local_clusters_get_throw_away_keys_partial_ones_must_bring_them(tmp_path):
    config = pseudo_cluster(2, 1, free_port())
    with pytest.raises(ClusterFileError, match="starts only part of the cluster: make keys "
                                               "once with 'netstorm-keygen <pseudo>'"):
        with_keys(config, tmp_path, whole_cluster=False)
    keyed = with_keys(config, tmp_path, whole_cluster=True)
    assert set(keyed.security.keys) == {"", "dc0", "dc1"}
    assert with_keys(keyed, tmp_path / "x", whole_cluster=False) is keyed
    env = worker_env(keyed, keyed.dcs[1], 0)
    assert env["NETSTORM_KEY_FILE"].endswith("dc-dc1.key_secret")
    assert env["NETSTORM_SCHEDULER_KEY"] == keyed.security.keys[""]
    assert load_cluster_text(tmp_path, to_toml(keyed)).security == keyed.security


def test_an_explicitly_insecure_cluster_tells_its_workers_so(tmp_path):
    from dataclasses import replace
    from netstorm.geoserver.config.keys import SecurityConfig
    config = replace(pseudo_cluster(1, 1, free_port()), security=SecurityConfig(curve=False))
    assert with_keys(config, tmp_path, whole_cluster=False) is config
    env = worker_env(config, config.dcs[0], 0)
    assert env["NETSTORM_INSECURE"] == "1" and "NETSTORM_KEY_FILE" not in env


def load_cluster_text(folder, text):
    path = folder / "rendered.toml"
    path.write_text(text)
    return load_cluster(path)
