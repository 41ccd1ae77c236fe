"""netstorm.wan.topology_file: reading, validating and writing topology files."""
import pytest

from netstorm.scheduler.topology import Link, TopologyError
from netstorm.wan.builtin import load_topology
from netstorm.wan.topology_file import parse_topology, to_toml


# --- files -----------------------------------------------------------------------------------

GOOD = """
name = "tri"
dcs = ["eu", "us", "asia"]
[[link]]
a = "eu"
b = "us"
mbps = 40
[[link]]
a = "us"
b = "asia"
mbps_ab = 20
mbps_ba = 12.5
"""


def test_good_file_parses_and_round_trips(tmp_path):
    path = tmp_path / "tri.toml"
    path.write_text(GOOD)
    t = load_topology(path)
    assert t.name == "tri" and t.dcs == ("eu", "us", "asia")
    assert t.links == (Link("eu", "us", 40.0, 40.0), Link("us", "asia", 20.0, 12.5))
    assert t.source == str(path)
    again = tmp_path / "again.toml"
    again.write_text(to_toml(t))
    assert load_topology(again) == t
    path.write_text(GOOD.replace("mbps = 40", "mbps = 40\nlatency_ms = 35"))
    t = load_topology(path)
    assert t.links[0].latency_ms == 35.0 and t.links[1].latency_ms == 0.0
    again.write_text(to_toml(t))
    assert load_topology(again) == t and "latency_ms = 35.0" in again.read_text()


def bad(body: str):
    return f'name = "bad"\n{body}'


LINK_AB = '[[link]]\na = "a"\nb = "b"\n'

REJECTIONS = [
    (bad('dcs = ["a", "b"]\n[[link]]\na = "a"\nb = "zz"\nmbps = 1\n'), "unknown DC 'zz'"),
    (bad('dcs = ["a", "b", "a"]\n' + LINK_AB + "mbps = 1\n"), "duplicate DC 'a'"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 1\n" + '[[link]]\na = "b"\nb = "a"\nmbps = 2\n'),
     "link #2 (b-a): duplicate link between b and a"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 1\n" + '[[link]]\na = "a"\nb = "a"\nmbps = 2\n'),
     "link #2 (a-a): self-loop"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 0\n"), "mbps must be > 0 Mbit/s, got 0"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = -5.5\n"), "mbps must be > 0 Mbit/s, got -5.5"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps_ab = 3\nmbps_ba = -1\n"),
     "mbps_ba must be > 0"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = inf\n"), "mbps must be > 0 Mbit/s, got inf"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + 'mbps = "fast"\n'),
     "mbps must be a number (Mbit/s), got 'fast'"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = true\n"), "mbps must be a number"),
    (bad('dcs = ["a", "b", "c"]\n' + LINK_AB + "mbps = 1\n"),
     "disconnected: the DCs fall into 2 groups with no link between them: [['a', 'b'], ['c']]"),
    (bad('dcs = ["a"]\n'), "at least 2 DCs, got 1"),
    (bad("dcs = []\n"), "at least 2 DCs, got 0"),
    ('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 1\n", "missing field 'name'"),
    (bad(LINK_AB + "mbps = 1\n"), "missing field 'dcs'"),
    (bad('dcs = ["a", "b"]\n'), "missing [[link]] tables"),
    (bad('dcs = ["a", "b"]\n[[link]]\na = "a"\nmbps = 1\n'), "link #1: missing field 'b'"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB), "link #1 (a-b): missing field 'mbps'"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps_ab = 3\n"), "missing field 'mbps_ba'"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 3\nmbps_ab = 3\n"), "not both"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 3\nrate = 3\n"), "unknown field(s) ['rate']"),
    (bad('dcs = "a b"\n' + LINK_AB + "mbps = 1\n"), "dcs must be a list of DC names"),
    (bad('dcs = ["a", "b c"]\n' + LINK_AB + "mbps = 1\n"), "DC name 'b c' must be"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 1\nlinks = 2\n"), "unknown field(s) ['links']"),
    (bad("dcs = [\n"), "not valid TOML"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 1\nlatency_ms = -1\n"),
     "latency_ms must be a number of milliseconds in [0, 10000], got -1"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + "mbps = 1\nlatency_ms = nan\n"),
     "latency_ms must be a number of milliseconds"),
    (bad('dcs = ["a", "b"]\n' + LINK_AB + 'mbps = 1\nlatency_ms = "40"\n'),
     "latency_ms must be a number of milliseconds"),
]


@pytest.mark.parametrize("text,message", REJECTIONS, ids=[m for _, m in REJECTIONS])
def test_rejections_name_file_and_problem(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(TopologyError, match="cannot read topology file .*nope.toml"):
        load_topology(tmp_path / "nope.toml")
    with pytest.raises(TopologyError, match="built-in topologies: small, hetero6, paper9"):
        load_topology("tiny")


def test_parse_topology_names_source():
    with pytest.raises(TopologyError, match=r"^mine: missing field 'name'"):
        parse_topology({"dcs": ["a", "b"]}, source="mine")
