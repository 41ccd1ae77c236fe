"""netstorm.geoserver.config.limits: one bound per number field for the file and the flags,
ASCII DC names, no control characters, the wire's node cap (derived from the header the
wire really packs), and the processes one host takes per core."""
import argparse
import struct

import pytest

from netstorm.geoserver.config.cluster_config import ClusterFileError
from netstorm.geoserver.config.limits import BOUNDS, MAX_DCS, MAX_WORKERS_PER_DC, Bound, \
    check_dc_name, check_strings, crowding, flag_type, node_count_problem, text_flag
from netstorm.geoserver.config.settings import MAX_NODES, NO_NODE_ID, RuntimeSettings, \
    SettingsError


def test_the_node_cap_is_what_the_wire_header_can_carry():
    """Node ids travel in the header's sender field; the largest value is NO_NODE. A cluster
    of MAX_NODES nodes has ids 0 .. MAX_NODES - 1, each one the header can pack."""
    from netstorm.geoserver.core import wire
    from netstorm.scheduler.registration import SCHEDULER_ID
    assert wire.NO_NODE == NO_NODE_ID == MAX_NODES
    fields = wire.HEADER.format.lstrip("<")     # magic, protocol, kind, sender, ...
    assert struct.calcsize("<" + fields[fields.index("B") + 2]) * 8 == 16
    assert SCHEDULER_ID == 0                    # ids count up from the scheduler's
    for sender in (0, MAX_NODES - 1):
        frames = wire.encode(wire.Message(wire.Kind.HEARTBEAT, sender=sender))
        assert wire.decode(frames).sender == sender
    with pytest.raises(struct.error):
        wire.encode(wire.Message(wire.Kind.HEARTBEAT, sender=MAX_NODES + 1))


def test_ids_are_given_in_turn_so_the_count_of_nodes_is_the_cap():
    from netstorm.geoserver.config.cluster import pseudo_cluster
    from netstorm.scheduler.registration import Registration
    config = pseudo_cluster(2, 2, 9000)
    registration = Registration(config.dcs)
    for dc in config.dcs:
        registration.add({"role": "server", "dc": dc.name, "address": "tcp://x:1"})
        for _ in range(dc.workers):
            registration.add({"role": "worker", "dc": dc.name, "address": "tcp://x:2"})
    ids = sorted(node.id for node in registration.table("tcp://s:1").nodes.values())
    assert ids == list(range(1 + len(config.dcs) + config.num_workers))


def test_a_cluster_over_the_cap_is_refused_naming_the_count():
    assert node_count_problem(MAX_DCS, MAX_DCS) == ""
    assert node_count_problem(1, MAX_WORKERS_PER_DC) == ""
    problem = node_count_problem(2, MAX_WORKERS_PER_DC)
    assert problem.startswith(f"{3 + MAX_WORKERS_PER_DC} nodes") and "16-bit" in problem
    from netstorm.geoserver.config.cluster import pseudo_cluster
    with pytest.raises(ClusterFileError, match="<pseudo>: 65541 nodes"):
        pseudo_cluster(4, 16384, 9000)


@pytest.mark.parametrize("bound, value, fits", [
    (Bound(float, 0.001, 86400.0), 0.001, True), (Bound(float, 0.001, 86400.0), 86400, True),
    (Bound(float, 0.001, 86400.0), 86400.5, False), (Bound(float, 0.001, 86400.0), 0.0, False),
    (Bound(float, 0.0, 1.0), float("nan"), False), (Bound(float, 0.0, 1e9), float("inf"), False),
    (Bound(float, 0.0, 1.0, above=True), 0.0, False), (Bound(int, 0, 5), 5, True),
    (Bound(int, 0, 5), 2.0, False), (Bound(int, 0, 5), True, False),
    (Bound(float, 0, 5), "1", False),
])
def test_a_bound_takes_finite_numbers_of_its_kind_in_its_range(bound, value, fits):
    assert (bound.problem(value) == "") is fits


def test_every_duration_rate_and_count_of_the_file_has_a_bound():
    for key in ("timeout_s", "heartbeat_s", "dead_after_s", "stall_s", "min_dwell_s",
                "fuse_linger_s", "mbps", "mbps_ab", "mbps_ba", "latency_ms", "workers",
                "chunk_bytes", "fuse_bytes", "worker_restarts", "server_restarts",
                "cluster_restarts", "scheduler_restarts", "replan_threshold", "server_port",
                "scheduler_port"):
        bound = BOUNDS[key]
        assert bound.problem(float("nan")) and bound.problem(float("inf"))
        assert bound.high < 1e12 or key in ("chunk_bytes", "fuse_bytes")


def test_flags_parse_with_the_fields_bound_and_say_what_is_wanted():
    assert flag_type("timeout_s")("2.5") == 2.5 and flag_type("chunk_bytes")("4096") == 4096
    for field, text, message in [
            ("timeout_s", "nan", "must be a finite number in [0.001, 86400] s, got nan"),
            ("chunk_bytes", "1e3", "must be a whole number in 1024..1073741824 bytes, "
                                   "got '1e3'"),
            ("worker_restarts", "-1", "must be a whole number in 0..100, got -1")]:
        with pytest.raises(argparse.ArgumentTypeError, match=message.replace("[", r"\[")):
            flag_type(field)(text)
    assert text_flag("runs/stats.jsonl") == "runs/stats.jsonl"
    with pytest.raises(argparse.ArgumentTypeError, match=r"control character \(U\+001B"):
        text_flag("\x1b[31m")


@pytest.mark.parametrize("name, shown", [
    ("ëu", "U+00EB 'ë'"), ("数据中心", "U+6570"), ("\u0435u", "U+0435 'е'"),
    ("e u", "U+0020 ' '"), ("", "must be 1 to 64"), ("x" * 65, "must be 1 to 64")])
def test_dc_names_are_ascii_and_an_odd_character_is_shown_by_its_code(name, shown):
    assert check_dc_name("eu-west_2", "f", ValueError) == "eu-west_2"
    with pytest.raises(ValueError, match="f: DC name .* must be 1 to 64 ASCII letters, digits, "
                                         r"'-' or '_' \(\[A-Za-z0-9_-\]\)") as info:
        check_dc_name(name, "f", ValueError)
    assert shown in str(info.value)


@pytest.mark.parametrize("data, message", [
    ({"scheduler": {"host": "a\nb"}}, "f: [scheduler] host holds a control character "
                                      "(U+000A at position 1)"),
    ({"dc": [{"name": "ok"}, {"name": "b\x07"}]}, "f: [[dc]] #2 name holds a control"),
    ({"ssh": {"options": ["-4", "x\x00"]}}, "f: [ssh] options[1] holds a control"),
    ({"security": {"dc_keys": {"e\tu": "k"}}}, "f: the key 'e\\tu' of [security] dc_keys"),
    ({"scheduler": {"stats": "s" * 4097}}, "f: [scheduler] stats is 4097 characters long"),
])
def test_every_string_of_a_file_is_checked_naming_its_field(data, message):
    with pytest.raises(ValueError) as info:
        check_strings(data, "f", ValueError)
    assert str(info.value).startswith(message), str(info.value)
    check_strings({"scheduler": {"host": "ëu 数据中心"}, "dc": [{"name": "eu"}]}, "f",
                  ValueError)


def test_more_than_a_few_processes_per_core_need_asking():
    assert crowding(20, 2) == "" and crowding(10, 0) == ""
    assert crowding(21, 2).startswith("21 processes on this host with 2 core(s) is more than "
                                      "10 per core")


def test_the_wire_settings_refuse_what_the_file_refuses():
    data = RuntimeSettings().to_json()
    data["timeout_s"] = 1e308
    with pytest.raises(SettingsError, match="timeout_s must be <= 86400"):
        RuntimeSettings.from_json(data)
