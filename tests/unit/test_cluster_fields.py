"""netstorm.geoserver.config.cluster_fields: the checks of one field of a cluster file."""
import pytest

from netstorm.geoserver.config.cluster_config import ClusterFileError
from netstorm.geoserver.config.cluster_fields import advertise, bounded, known_fields, need, \
    read_toml


def test_an_unknown_field_is_a_typo_named_with_the_closest_known_one():
    assert known_fields({"policy": "star"}, "wan", "f [wan]") == {"policy": "star"}
    with pytest.raises(ClusterFileError, match=r"f \[wan\]: unknown field 'polcy'; did you "
                                               r"mean 'policy'\?"):
        known_fields({"polcy": "star"}, "wan", "f [wan]")
    with pytest.raises(ClusterFileError, match="f: unknown table 'zzz'; known: scheduler"):
        known_fields({"zzz": {}}, "", "f")
    with pytest.raises(ClusterFileError, match="f: must be a table, got 3"):
        known_fields(3, "wan", "f")


def test_a_field_is_required_and_typed_an_int_is_a_float_a_bool_never_a_number():
    assert need({"x": 2}, "x", float, "f") == 2.0 and isinstance(need({"x": 2}, "x", float, "f"),
                                                                 float)
    assert need({"x": True}, "x", bool, "f") is True
    with pytest.raises(ClusterFileError, match="f: missing field 'x'"):
        need({}, "x", int, "f")
    with pytest.raises(ClusterFileError, match="f: field 'x' must be int, got True"):
        need({"x": True}, "x", int, "f")



@pytest.mark.parametrize("table, key, message", [
    ({"server_port": 70000}, "server_port", "f: server_port must be a whole number in "
                                            "0..65535, got 70000 (0: any free port)"),
    ({"timeout_s": float("nan")}, "timeout_s", "f: timeout_s must be a finite number in "
                                               "[0.001, 86400] s, got nan"),
    ({"mbps": float("inf")}, "mbps", "f: mbps must be a finite number in [0.001, 1e+07] "
                                     "Mbit/s, got inf"),
    ({"workers": 1.5}, "workers", "f: field 'workers' must be int, got 1.5"),
])
def test_a_number_field_is_typed_finite_and_within_its_bound(table, key, message):
    with pytest.raises(ClusterFileError) as info:
        bounded(table, key, "f")
    assert str(info.value) == message
    assert bounded({"timeout_s": 3}, "timeout_s", "f") == 3.0
    assert bounded({"port": 1}, "port", "f", "scheduler_port") == 1


def test_advertise_defaults_to_the_bind_address():
    assert advertise({}, "127.0.0.1", "f") == ""
    assert advertise({"advertise": "127.0.0.1"}, "127.0.0.1", "f") == ""
    assert advertise({"advertise": "127.0.0.5"}, "0.0.0.0", "f") == "127.0.0.5"


def test_read_toml_names_the_file(tmp_path):
    path = tmp_path / "c.toml"
    with pytest.raises(ValueError, match=f"cannot read cluster file {path}: .*; hint"):
        read_toml(path, ValueError, "cluster file", "; hint")
    path.write_text("a = [")
    with pytest.raises(ValueError, match=f"{path}: not valid TOML"):
        read_toml(path, ValueError, "cluster file")
    path.write_text("a = 1")
    assert read_toml(path, ValueError, "cluster file") == {"a": 1}
