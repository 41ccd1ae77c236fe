"""netstorm.geoserver.config.emulation: the [emulation] table and the delays a process applies."""
import pytest

from netstorm.geoserver.config.cluster import ClusterFileError
from netstorm.geoserver.config.emulation import EmulationConfig, parse_emulation, receive_delays

DCS = {"eu", "us", "asia"}
HOSTS = {"eu": "10.1.0.1", "us": "10.1.1.1", "asia": "10.1.2.1"}


def parse(raw):
    return parse_emulation(raw, DCS, "c.toml [emulation]", ClusterFileError)


def test_delays_parse_and_each_process_holds_what_comes_from_other_dcs():
    emulation = parse({"delay_ms": [["eu", "us", 40], ["us", "eu", 40.0], ["asia", "us", 90],
                                    ["us", "asia", 0]]})
    assert emulation.on and emulation.delays[0] == ("eu", "us", 40.0)
    assert parse(emulation.to_params()) == emulation
    # a process in us: messages from eu's and asia's addresses wait; its own DC's do not
    assert receive_delays(emulation, HOSTS, "10.1.1.1", ClusterFileError) == \
        {"10.1.0.1": 0.04, "10.1.2.1": 0.09}
    # asia gets nothing delayed (us -> asia is 0; eu -> asia not given)
    assert receive_delays(emulation, HOSTS, "10.1.2.1", ClusterFileError) == {}
    assert receive_delays(emulation, HOSTS, "127.0.0.1", ClusterFileError) == {}
    assert receive_delays(EmulationConfig(), HOSTS, "10.1.1.1", ClusterFileError) == {}


def test_delays_need_one_address_per_dc():
    emulation = parse({"delay_ms": [["eu", "us", 40]]})
    with pytest.raises(ClusterFileError, match="one address per DC"):
        receive_delays(emulation, {"eu": "127.0.0.1", "us": "127.0.0.1", "asia": "10.0.0.3"},
                       "127.0.0.1", ClusterFileError)


@pytest.mark.parametrize("raw, message", [
    ([], "must be a table"),
    ({"delay": []}, "unknown field 'delay'"),
    ({"delay_ms": "40"}, "must be a list of"),
    ({"delay_ms": [["eu", "us"]]}, r"delay_ms\[0\] must be \[from, to, ms\]"),
    ({"delay_ms": [["eu", "mars", 4]]}, "unknown DC 'mars'"),
    ({"delay_ms": [["eu", "eu", 4]]}, "self-pair or given twice"),
    ({"delay_ms": [["eu", "us", 4], ["eu", "us", 5]]}, r"delay_ms\[1\].*given twice"),
    ({"delay_ms": [["eu", "us", -1]]}, "ms must be a number in"),
    ({"delay_ms": [["eu", "us", float("nan")]]}, "ms must be a number in"),
    ({"delay_ms": [["eu", "us", True]]}, "ms must be a number in"),
    ({"delay_ms": [["eu", "us", 1e6]]}, "ms must be a number in"),
])
def test_bad_tables_are_refused_naming_the_entry(raw, message):
    with pytest.raises(ClusterFileError, match=message):
        parse(raw)
