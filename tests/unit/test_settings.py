"""geoserver.settings: the runtime settings as one typed object, its defaults once, and its
wire form decoded with a clear error for anything wrong."""
import json

import pytest

from netstorm.geoserver.config.cluster import ClusterConfig, DataCenter, Link, pseudo_cluster
from netstorm.geoserver.config.settings import DEFAULT_CHUNK_BYTES, IDLE_PROBE_S, PROBE_BYTES, \
    PROBE_TIMEOUT_S, ProbeRequest, RuntimeSettings, SettingsError


def over_the_wire(data):
    return json.loads(json.dumps(data))


def test_round_trip_through_json_gives_the_same_settings():
    settings = RuntimeSettings(chunk_bytes=4096, timeout_s=7.5, heartbeat_s=0.2, stall_s=2.0,
                               probe_idle_s=IDLE_PROBE_S, round_gate=True,
                               links=(("eu", "us", 100.0, 40.5), ("us", "ap", 10.0, 10.0)))
    assert RuntimeSettings.from_json(over_the_wire(settings.to_json())) == settings
    assert RuntimeSettings.from_json(over_the_wire(RuntimeSettings().to_json())) \
        == RuntimeSettings()


def test_the_cluster_file_and_the_settings_share_their_defaults():
    config = pseudo_cluster(2, 1, 9000)
    assert RuntimeSettings.from_cluster(config) == RuntimeSettings()
    assert config.chunk_bytes == DEFAULT_CHUNK_BYTES == RuntimeSettings().chunk_bytes


@pytest.mark.parametrize("dcs,policy,adapt,gate,probe_idle", [
    (2, "fapt", True, True, IDLE_PROBE_S),
    (2, "star", True, False, IDLE_PROBE_S),
    (1, "fapt", True, False, IDLE_PROBE_S),
    (2, "fapt", False, False, 0.0),
])
def test_from_cluster_gates_rounds_exactly_when_the_scheduler_re_plans(dcs, policy, adapt,
                                                                         gate, probe_idle):
    settings = RuntimeSettings.from_cluster(pseudo_cluster(dcs, 1, 9000, policy=policy,
                                                           adapt=adapt, timeout_s=5,
                                                           stall_s=2.0))
    assert (settings.round_gate, settings.probe_idle_s) == (gate, probe_idle)
    assert settings.timeout_s == 5.0 and isinstance(settings.timeout_s, float)
    assert settings.stall_s == 2.0 and settings.links == ()


def test_links_join_as_floats_and_give_rates_both_ways():
    config = ClusterConfig("127.0.0.1", 9000, (DataCenter("eu", "127.0.0.1", 0, 1),
                                               DataCenter("us", "127.0.0.1", 0, 1)),
                           links=(Link("eu", "us", 100, 50),))
    settings = RuntimeSettings.from_cluster(config).with_links(config.links)
    assert settings.links == (("eu", "us", 100.0, 50.0),)
    assert settings.rates() == {("eu", "us"): 100.0, ("us", "eu"): 50.0}
    assert RuntimeSettings.from_json(over_the_wire(settings.to_json())) == settings


def _with(**changes):
    data = RuntimeSettings().to_json()
    data.update(changes)
    return data


def _without(name):
    data = RuntimeSettings().to_json()
    del data[name]
    return data


@pytest.mark.parametrize("data,message", [
    (None, "RuntimeSettings: expected an object, got NoneType"),
    ([1, 2], "RuntimeSettings: expected an object, got list"),
    (_without("chunk_bytes"), "RuntimeSettings: missing field 'chunk_bytes'"),
    (_without("links"), "RuntimeSettings: missing field 'links'"),
    (_with(chunk_size=1), "RuntimeSettings: unknown field 'chunk_size'"),
    (_with(chunk_bytes="1048576"), "chunk_bytes must be an integer, got '1048576'"),
    (_with(chunk_bytes=4096.0), "chunk_bytes must be an integer, got 4096.0"),
    (_with(chunk_bytes=True), "chunk_bytes must be an integer, got True"),
    (_with(chunk_bytes=512), "chunk_bytes must be >= 1024, got 512"),
    (_with(timeout_s=0), "timeout_s must be > 0, got 0"),
    (_with(heartbeat_s=-0.5), "heartbeat_s must be > 0, got -0.5"),
    (_with(stall_s="3"), "stall_s must be a number, got '3'"),
    (_with(stall_s=None), "stall_s must be a number, got None"),
    (_with(stall_s=float("nan")), "stall_s must be finite, got nan"),
    (_with(timeout_s=float("inf")), "timeout_s must be finite, got inf"),
    (_with(probe_idle_s=-1.0), "probe_idle_s must be >= 0.0, got -1.0"),
    (_with(round_gate=1), "round_gate must be true or false, got 1"),
    (_with(links="eu-us"), "links must be a list, got 'eu-us'"),
    (_with(links=[["eu", "us", 10]]), "links[0] must be [a, b, mbps_ab, mbps_ba]"),
    (_with(links=[["eu", "us", 1, 1], ["eu", "eu", 1, 1]]),
     "links[1] must name two different DCs"),
    (_with(links=[["eu", 3, 1, 1]]), "links[0] must name two different DCs"),
    (_with(links=[["eu", "us", 0, 1]]), "links[0] mbps_ab must be > 0, got 0"),
    (_with(links=[["eu", "us", 1, "fast"]]), "links[0] mbps_ba must be a number, got 'fast'"),
])
def test_every_bad_field_is_rejected_by_name(data, message):
    with pytest.raises(SettingsError) as info:
        RuntimeSettings.from_json(over_the_wire(data))
    assert message in str(info.value)
    assert str(info.value).startswith("RuntimeSettings: ")


def test_probe_request_round_trips_with_its_defaults_written_once():
    request = ProbeRequest()
    assert (request.probe_bytes, request.timeout_s) == (PROBE_BYTES, PROBE_TIMEOUT_S)
    assert ProbeRequest.from_json(over_the_wire(request.to_json())) == request
    assert request.to_json() == {"probe_bytes": PROBE_BYTES, "timeout_s": PROBE_TIMEOUT_S}


@pytest.mark.parametrize("data,message", [
    ({"probe_bytes": 1 << 21}, "ProbeRequest: missing field 'timeout_s'"),
    ({"probe_bytes": 0, "timeout_s": 5.0}, "ProbeRequest: probe_bytes must be >= 1, got 0"),
    ({"probe_bytes": 1 << 21, "timeout_s": "5"},
     "ProbeRequest: timeout_s must be a number, got '5'"),
])
def test_bad_probe_requests_are_rejected_by_name(data, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        ProbeRequest.from_json(data)
