import re
import socket
import tomllib

import netstorm.geoserver.config.hosts as hosts
import pytest
import zmq
from netstorm.geoserver.config.cluster import (
    ClusterFileError,
    load_cluster,
    parse_cluster,
    pseudo_cluster,
)
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.sync import SyncConfig

GOOD = """
[scheduler]
host = "127.0.0.1"
port = 9000
[[dc]]
name = "eu"
host = "127.0.0.1"
server_port = 9100
workers = 2
[[dc]]
name = "us-east"
host = "localhost"
server_port = 0
workers = 1
[transport]
chunk_bytes = 65536
timeout_s = 5
[wan]
policy = "star"
hub = "us-east"
"""


def test_good_file_parses(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    c = load_cluster(path)
    assert [d.name for d in c.dcs] == ["eu", "us-east"]
    assert c.num_workers == 3 and c.chunk_bytes == 65536 and c.timeout_s == 5.0
    assert c.dcs[1].host == "127.0.0.1" and c.hub_dc == "us-east"
    assert c.scheduler_address == "tcp://127.0.0.1:9000"


def test_to_toml_roundtrips(tmp_path):
    c = pseudo_cluster(3, 2, 9123, chunk_bytes=4096, timeout_s=7.5, max_idle_s=30.0)
    path = tmp_path / "c.toml"
    path.write_text(to_toml(c))
    assert load_cluster(path) == c
    shared = pseudo_cluster(3, 1, 9123, policy="fapt", trees="shared")
    path.write_text(to_toml(shared))
    assert load_cluster(path) == shared and load_cluster(path).trees == "shared"


@pytest.mark.parametrize("sync", ["hfa:k1=4,k2=2", "mixed:staleness=3", "esync:max_steps=5",
                                  "diloco:h=7,outer_lr=1.0,outer_momentum=0.0,fragments=2,"
                                  "delay=1,mix=0.25"])
def test_sync_table_parses_and_roundtrips(tmp_path, sync):
    c = pseudo_cluster(2, 1, 9123, sync=SyncConfig.parse(sync))
    path = tmp_path / "c.toml"
    path.write_text(to_toml(c))
    assert "[sync]" in path.read_text() and load_cluster(path) == c
    assert load_cluster(path).sync.describe() == sync


def _replace(old, new):
    return GOOD.replace(old, new, 1)


@pytest.mark.parametrize("text,message", [
    (GOOD.split("[[dc]]")[0], "no [[dc]] tables"),
    (GOOD.replace('policy = "star"', 'policy = "fapt"\ntrees = "both"'),
     "trees must be one of split, shared, got 'both'"),
    (GOOD + '[sync]\nmode = "hfa"\nk1 = 0\n', "[sync]: k1 must be a whole number in 1.."),
    (GOOD + '[sync]\nmode = "mixed"\nk2 = 2\n', "[sync]: sync mode 'mixed' takes no 'k2'"),
    (GOOD.replace('policy = "star"', 'policy = "fapt"\nadapt = true') +
     '[sync]\nmode = "mixed"\n', "[sync] mode 'mixed' cannot run with [wan] adapt"),
    (GOOD + '[compression]\ntype = "fp16"\n[sync]\nmode = "mixed"\n',
     "[sync] mode 'mixed' cannot run with [compression]"),
    (_replace('name = "us-east"', 'name = "eu"').replace('hub = "us-east"', ""),
     "duplicate DC name 'eu'"),
    (_replace('name = "eu"\n', ""), "missing field 'name'"),
    (_replace("workers = 2", "workers = 0"), "workers must be a whole number in 1..65533, got 0"),
    (_replace("workers = 2", 'workers = "two"'), "must be int"),
    (_replace("server_port = 9100", "server_port = 70000"),
     "server_port must be a whole number in 0..65535, got 70000"),
    (_replace('host = "127.0.0.1"\nport', 'host = "no-such-host.invalid"\nport'),
     "host name 'no-such-host.invalid' does not resolve on this host"),
    (_replace('host = "127.0.0.1"\nport', 'host = "bad_host!"\nport'),
     "host 'bad_host!' is neither an IP address nor a host name"),
    (_replace("server_port = 9100", "server_port = 9000"), "same host and port"),
    (_replace('hub = "us-east"', 'hub = "mars"'), "hub 'mars' is not a declared DC"),
    (_replace('policy = "star"', 'policy = "ring"'), "unknown policy 'ring'"),
    (_replace("chunk_bytes = 65536", "chunk_bytes = 10"),
     "chunk_bytes must be a whole number in 1024..1073741824 bytes, got 10"),
    (_replace("timeout_s = 5", "timeout_s = 5\nheartbeat_s = 1\ndead_after_s = 1.5"),
     "dead_after_s = 1.5 is below two heartbeats"),
    (_replace("timeout_s = 5", "timeout_s = 0.5"), "timeout_s = 0.5 is below two heartbeats"),
    ("[[dc]]\nname='x'", "missing [scheduler] table"),
    ("this is = not toml =", "not valid TOML"),
])
def test_bad_files_are_rejected_naming_file_and_field(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ClusterFileError, match=message.replace("[", r"\[").replace(
            "]", r"\]")) as info:
        load_cluster(path)
    assert str(path) in str(info.value)


def test_missing_file_is_clear():
    with pytest.raises(ClusterFileError, match="cannot read cluster file"):
        load_cluster("/nonexistent/cluster.toml")


LINKS = """
[[link]]
a = "eu"
b = "us-east"
mbps = 40
"""


def test_links_parse_and_roundtrip(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(GOOD.replace('policy = "star"', 'policy = "fapt"') + LINKS)
    c = load_cluster(path)
    assert c.policy == "fapt" and len(c.links) == 1
    assert (c.links[0].a, c.links[0].mbps_ab, c.links[0].mbps_ba) == ("eu", 40.0, 40.0)
    path.write_text(to_toml(c))
    assert load_cluster(path) == c


def test_link_latency_and_emulated_delays_parse_and_roundtrip(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(GOOD + LINKS + "latency_ms = 42\n[emulation]\n"
                    'delay_ms = [["eu", "us-east", 42], ["us-east", "eu", 42.5]]\n')
    c = load_cluster(path)
    assert c.links[0].latency_ms == 42.0
    assert c.emulation.delays == (("eu", "us-east", 42.0), ("us-east", "eu", 42.5))
    path.write_text(to_toml(c))
    assert load_cluster(path) == c
    path.write_text(GOOD + '[emulation]\ndelay_ms = [["eu", "mars", 1]]\n')
    with pytest.raises(ClusterFileError, match=r"\[emulation\] delay_ms\[0\]: unknown DC"):
        load_cluster(path)


@pytest.mark.parametrize("link,message", [
    ('a = "eu"\nb = "us-east"\nmbps = 1\nlatency_ms = -3', "latency_ms must be a finite number in"),
    ('a = "eu"\nb = "mars"\nmbps = 1', "unknown DC 'mars'"),
    ('a = "eu"\nb = "eu"\nmbps = 1', "two different DCs"),
    ('a = "eu"\nb = "us-east"\nmbps = 0', "mbps must be a finite number in"),
    ('a = "eu"\nb = "us-east"\nmbps_ab = 3', "missing field 'mbps_ba'"),
])
def test_bad_links_are_rejected(tmp_path, link, message):
    path = tmp_path / "c.toml"
    path.write_text(GOOD + "[[link]]\n" + link + "\n")
    with pytest.raises(ClusterFileError, match=message):
        load_cluster(path)


def test_duplicate_link_is_rejected(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(GOOD + LINKS + LINKS.replace('a = "eu"\nb = "us-east"',
                                                 'a = "us-east"\nb = "eu"'))
    with pytest.raises(ClusterFileError, match="duplicate link"):
        load_cluster(path)


K1, K2, K3 = (zmq.curve_keypair()[0].decode() for _ in range(3))
SECURE = GOOD + f"""
[security]
secret_keys = "keys"
scheduler_key = "{K1}"
[security.dc_keys]
eu = "{K2}"
us-east = "{K3}"
"""


def test_security_table_parses_and_the_key_folder_is_relative_to_the_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(SECURE)
    security = load_cluster(path).security
    assert security.curve and security.keys == {"": K1, "eu": K2, "us-east": K3}
    assert security.secret_keys == str(tmp_path / "keys")
    assert load_cluster_from(tmp_path, GOOD).security.keys == {}      # none: curve still on
    assert load_cluster_from(tmp_path, GOOD + "[security]\ncurve = false\n").security.curve \
        is False


def load_cluster_from(folder, text):
    path = folder / "x.toml"
    path.write_text(text)
    return load_cluster(path)


BAD_SECURITY = [
    (f'us-east = "{K3}"\n', "", "no public key for us-east"),
    (f'scheduler_key = "{K1}"\n', "", "no public key for the scheduler"),
    (f'us-east = "{K3}"', f'us-east = "{K2}"', "two principals share one public key"),
    (f'us-east = "{K3}"', 'us-east = "short"', "dc_keys.us-east: a key has 40 characters"),
    (f'us-east = "{K3}"', f'us-east = "{"#" * 40}"', "dc_keys.us-east: not a Z85 key"),
    (f'us-east = "{K3}"', f'mars = "{K3}"', "dc_keys names unknown DC 'mars'"),
    ('secret_keys = "keys"', 'secret_key = "keys"', "unknown field 'secret_key'"),
    ('secret_keys = "keys"', 'curve = "yes"', "field 'curve' must be bool"),
]


# named by the message: the keys are made afresh by each process that collects the tests
@pytest.mark.parametrize("old, new, message", BAD_SECURITY, ids=[m for _, _, m in BAD_SECURITY])
def test_bad_security_tables_are_rejected(tmp_path, old, new, message):
    path = tmp_path / "bad.toml"
    path.write_text(SECURE.replace(old, new, 1))
    with pytest.raises(ClusterFileError, match=message):
        load_cluster(path)


@pytest.mark.parametrize("old, new, message", [
    ('policy = "star"', 'polcy = "star"', "[wan]: unknown field 'polcy'; did you mean 'policy'?"),
    ("[transport]", "[transprt]", "unknown table 'transprt'; did you mean 'transport'?"),
    ("workers = 2", "workers = 2\nworker = 3",
     "[[dc]] #1: unknown field 'worker'; did you mean 'workers'?"),
    ("port = 9000", "port = 9000\nbogus = 1", "[scheduler]: unknown field 'bogus'; known: host"),
    ("[scheduler]", "security = 5\n[scheduler]", "[security]: must be a table, got 5"),
])
def test_unknown_fields_are_typos_named_with_a_suggestion(tmp_path, old, new, message):
    path = tmp_path / "c.toml"
    path.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(ClusterFileError) as exc:
        load_cluster(path)
    assert message in str(exc.value) and str(path) in str(exc.value)


def test_host_names_are_resolved_once_when_the_file_is_read(tmp_path, monkeypatch):
    asked = []

    def resolve(name, *args):
        asked.append(name)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", 0))]
    monkeypatch.setattr(hosts.socket, "getaddrinfo", resolve)
    path = tmp_path / "c.toml"
    path.write_text(GOOD.replace('host = "127.0.0.1"\nserver_port', 'host = "eu-gw.example.org"'
                                 '\nserver_port'))
    config = load_cluster(path)
    assert config.dc("eu").host == "10.1.2.3" and asked == ["eu-gw.example.org"]
    assert config.dc("us-east").host == "127.0.0.1"        # IPs and localhost: no lookup


HOSTS = GOOD.replace('name = "eu"\nhost = "127.0.0.1"',
                     'name = "eu"\nhost = "0.0.0.0"\nadvertise = "127.0.0.5"\n'
                     'worker_hosts = ["127.0.0.6", "localhost"]', 1) + \
    '[ssh]\nuser = "ml"\nport = 2222\noptions = ["-4"]\nenv = ["HOME"]\n' \
    'aliases = {"localhost" = "gw"}\n'


def test_bind_advertise_worker_hosts_and_ssh_parse_and_roundtrip(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(HOSTS.replace('[scheduler]\nhost = "127.0.0.1"',
                                  '[scheduler]\nhost = "0.0.0.0"\nadvertise = "127.0.0.7"'))
    c = load_cluster(path)
    eu = c.dc("eu")
    assert (eu.host, eu.advertise, eu.server_host) == ("0.0.0.0", "127.0.0.5", "127.0.0.5")
    assert [eu.worker_host(i) for i in range(3)] == ["127.0.0.6", "127.0.0.1", "127.0.0.6"]
    assert c.dc("us-east").worker_host(0) == "127.0.0.1"
    assert c.scheduler_address == "tcp://127.0.0.7:9000" and c.scheduler_host == "0.0.0.0"
    assert c.ssh.aliases == (("127.0.0.1", "gw"),) and c.ssh.port == 2222
    again = tmp_path / "again.toml"
    again.write_text(to_toml(c))
    assert load_cluster(again) == c


@pytest.mark.parametrize("old, new, message", [
    ('host = "127.0.0.1"\nserver_port = 9100', 'host = "0.0.0.0"\nserver_port = 9100',
     "DC 'eu': host = '0.0.0.0' binds every interface: give 'advertise'"),
    ('server_port = 9100', 'server_port = 9100\nadvertise = "0.0.0.0"',
     "advertise = '0.0.0.0' is not an address peers can reach"),
    ('server_port = 9100', 'server_port = 9100\nworker_hosts = []',
     "worker_hosts must be a non-empty list"),
    ('server_port = 9100', 'server_port = 9100\nworker_hosts = ["a", "b", "c"]',
     "3 worker_hosts for 2 worker(s): a host would run none"),
    ('server_port = 9100', 'server_port = 9100\nworker_hosts = ["10.0.0.1", "10.0.0.1"]',
     "worker_hosts lists a host twice"),
    ('server_port = 9100', 'server_port = 9100\nworker_hosts = ["0.0.0.0"]',
     "binds every interface"),
    ('server_port = 9100', 'server_port = 9100\nworkers_hosts = ["10.0.0.1"]',
     "unknown field 'workers_hosts'; did you mean 'worker_hosts'"),
    ('[wan]', '[ssh]\nport = "22"\n[wan]', "[ssh]: port must be an integer"),
])
def test_bad_host_fields_are_refused_naming_the_dc(old, new, message):
    with pytest.raises(ClusterFileError, match=re.escape(message)):
        parse_cluster(tomllib.loads(_replace(old, new)), source="c.toml")


def test_recovery_table_parses_roundtrips_and_needs_fsa(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(GOOD + '[recovery]\nworker_restarts = 2\nresume = "ckpt/at12.npz"\n'
                    'checkpoint = "ckpt/latest.npz"\ncluster_restarts = 3\nserver_restarts = 1\n'
                    'scheduler_restarts = 2\n')
    c = load_cluster(path)
    assert c.scheduler_restarts == 2
    assert c.worker_restarts == 2 and c.resume == str(tmp_path / "ckpt" / "at12.npz")
    assert c.server_restarts == 1
    assert c.checkpoint == str(tmp_path / "ckpt" / "latest.npz") and c.cluster_restarts == 3
    again = tmp_path / "again.toml"
    again.write_text(to_toml(c))
    assert load_cluster(again) == c
    for text, message in [
            (GOOD + "[recovery]\nworker_restarts = -1\n",
             "worker_restarts must be a whole number in 0..100, got -1"),
            (GOOD + "[recovery]\nworker_restart = 1\n", "did you mean 'worker_restarts'"),
            (GOOD + '[recovery]\nworker_restarts = 1\n[sync]\nmode = "esync"\n',
             "worker_restarts needs [sync] mode 'fsa', 'diloco' or 'hfa': under 'esync'"),
            (GOOD + '[recovery]\nworker_restarts = 1\n[sync]\nmode = "hfa"\nk2 = 2\n',
             "worker_restarts needs [sync] k2 = 1 under 'hfa' (got 2)"),
            (GOOD + '[recovery]\nworker_restarts = 1\n[sync]\nmode = "diloco"\nh = 4\n'
                    'fragments = 2\n',
             "worker_restarts needs [sync] fragments = 1 and delay = 0 under 'diloco'"),
            (GOOD + '[recovery]\ncheckpoint = "c.npz"\n[sync]\nmode = "diloco"\n',
             "checkpoint needs [sync] mode 'fsa'"),
            (GOOD + "[recovery]\ncluster_restarts = 1\n",
             "cluster_restarts needs 'checkpoint'"),
            (GOOD + '[recovery]\ncheckpoint = "c.npz"\ncluster_restarts = 101\n',
             "cluster_restarts must be a whole number in 0..100, got 101"),
            (GOOD + '[recovery]\nserver_restarts = 1\n[sync]\nmode = "mixed"\n',
             "server_restarts cannot run with [sync] mode 'mixed': each DC's replica"),
            (GOOD + '[recovery]\nserver_restarts = 1\n[sync]\nmode = "hfa"\nk2 = 2\n',
             "server_restarts needs [sync] k2 = 1 under 'hfa' (got 2)")]:
        with pytest.raises(ClusterFileError, match=re.escape(message)):
            parse_cluster(tomllib.loads(text), source="c.toml")
    for extra in ('[compression]\ntype = "fp16"\n', '[sync]\nmode = "esync"\n',
                  '[sync]\nmode = "diloco"\n[compression]\ntype = "int8"\n',
                  '[sync]\nmode = "hfa"\nk1 = 4\n'):   # recovery in these modes too
        text = GOOD + "[recovery]\nserver_restarts = 1\n" + extra
        assert parse_cluster(tomllib.loads(text), source="c.toml").server_restarts == 1
    for extra in ('[sync]\nmode = "diloco"\nh = 5\n', '[sync]\nmode = "hfa"\nk1 = 4\n'):
        text = GOOD + "[recovery]\nworker_restarts = 2\n" + extra   # docs/recovery-localrestart.md
        assert parse_cluster(tomllib.loads(text), source="c.toml").worker_restarts == 2


def test_audit_every_parses_roundtrips_travels_to_the_servers_and_defaults_on(tmp_path):
    """[recovery] audit_every (docs/recovery-audit.md): on by default (10), 0 turns it off;
    a value other than the default survives the file a launcher hands its processes."""
    from netstorm.geoserver.config.settings import DEFAULT_AUDIT_EVERY, RuntimeSettings
    assert parse_cluster(tomllib.loads(GOOD)).audit_every == DEFAULT_AUDIT_EVERY == 10
    path = tmp_path / "c.toml"
    for every in (0, 3):
        path.write_text(GOOD + f"[recovery]\naudit_every = {every}\n")
        c = load_cluster(path)
        assert c.audit_every == every
        assert RuntimeSettings.from_json(
            RuntimeSettings.from_cluster(c).to_json()).audit_every == every
        again = tmp_path / "again.toml"
        again.write_text(to_toml(c))
        assert load_cluster(again) == c
    with pytest.raises(ClusterFileError, match=re.escape("audit_every must be a whole "
                                                         "number in 0..1048576")):
        parse_cluster(tomllib.loads(GOOD + "[recovery]\naudit_every = -2\n"), source="c")


def test_fusion_settings_parse_roundtrip_and_travel_to_every_node(tmp_path):
    from netstorm.geoserver.config.settings import DEFAULT_FUSE_BYTES, RuntimeSettings
    path = tmp_path / "c.toml"
    path.write_text(GOOD.replace("timeout_s = 5", "timeout_s = 5\nfuse_bytes = 0\n"
                                                  "fuse_linger_s = 0.005"))
    c = load_cluster(path)
    assert (c.fuse_bytes, c.fuse_linger_s) == (0, 0.005)
    path.write_text(to_toml(c))
    assert load_cluster(path) == c
    settings = RuntimeSettings.from_json(RuntimeSettings.from_cluster(c).to_json())
    assert (settings.fuse_bytes, settings.fuse_linger_s) == (0, 0.005)
    assert pseudo_cluster(2, 1, 9123).fuse_bytes == DEFAULT_FUSE_BYTES


@pytest.mark.parametrize("line,message", [
    ("fuse_bytes = -1", "fuse_bytes must be a whole number in 0..1073741824 bytes, got -1 "
                       "(0: no fusion)"),
    ("fuse_bytes = 1.5", "field 'fuse_bytes' must be int"),
    ("fuse_linger_s = 2", "fuse_linger_s must be a finite number in [0, 1] s, got 2.0"),
    ("fuse_linger_s = -0.1", "fuse_linger_s must be a finite number in [0, 1] s, got -0.1"),
    ("fuse_linger_s = 'soon'", "field 'fuse_linger_s' must be float"),
    ("fuse_byte = 10", "fuse_byte"),
])
def test_bad_fusion_settings_are_refused_naming_the_field(tmp_path, line, message):
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace("timeout_s = 5", f"timeout_s = 5\n{line}"))
    with pytest.raises(ClusterFileError, match=re.escape(message)):
        load_cluster(path)


def test_the_dataplane_setting_parses_roundtrips_travels_and_refuses_unknown_values(tmp_path):
    from netstorm.geoserver.config.settings import RuntimeSettings, SettingsError
    path = tmp_path / "c.toml"
    path.write_text(GOOD.replace("timeout_s = 5", 'timeout_s = 5\ndataplane = "python"'))
    c = load_cluster(path)
    assert c.dataplane == "python"
    path.write_text(to_toml(c))
    assert load_cluster(path) == c
    assert RuntimeSettings.from_json(RuntimeSettings.from_cluster(c).to_json()).dataplane == \
        "python"
    assert pseudo_cluster(2, 1, 9123).dataplane == "auto"
    path.write_text(GOOD.replace("timeout_s = 5", 'timeout_s = 5\ndataplane = "c++"'))
    with pytest.raises(ClusterFileError, match=r"\[transport\].*dataplane must be one of "
                                               r"'auto', 'native', 'python', got 'c\+\+'"):
        load_cluster(path)
    data = RuntimeSettings().to_json()
    data["dataplane"] = "fast"
    with pytest.raises(SettingsError, match="dataplane must be one of auto, native, python"):
        RuntimeSettings.from_json(data)


def test_strings_toml_must_quote_or_escape_roundtrip_through_the_writer(tmp_path):
    """tomli-w quotes and escapes what the old hand-written writer did not: a DC name with
    '-' as a key of [security.dc_keys], quotes, backslashes and non-ASCII text in paths."""
    from dataclasses import replace
    from netstorm.geoserver.config.cluster import DataCenter
    from netstorm.geoserver.config.keys import SecurityConfig
    c = replace(pseudo_cluster(2, 1, 9123), stats='runs/"ü\\stats".jsonl',
                checkpoint="C:\\ckpt\\münchen \"1\".npz",
                dcs=(DataCenter("eu-west_2", "127.0.0.1", 0, 1),
                     DataCenter("1", "127.0.0.1", 0, 1)),
                security=SecurityConfig(public_keys=(("", K1), ("1", K2), ("eu-west_2", K3)),
                                        secret_keys="kéys dir"))
    text = to_toml(c)
    assert tomllib.loads(text)["security"]["dc_keys"] == {"1": K2, "eu-west_2": K3}
    assert parse_cluster(tomllib.loads(text), source="again") == c


def test_the_writer_refuses_a_config_the_children_would_refuse():
    from dataclasses import replace
    c = replace(pseudo_cluster(2, 1, 9123), stats="a\nb")
    with pytest.raises(ClusterFileError, match=r"the cluster file written from <pseudo>: "
                                               r"\[scheduler\] stats holds a control"):
        to_toml(c)


def test_a_sync_quorum_round_trips_and_is_at_most_the_cluster_s_dcs(tmp_path):
    """[sync] quorum (docs/sync.md#quorum-rounds-not-waiting-for-a-late-dc-hfa-diloco): written back and read as it was; more DCs than
    the cluster has is refused naming both."""
    dcs = parse_cluster(tomllib.loads(GOOD), source="c.toml").dcs
    path = tmp_path / "c.toml"
    path.write_text(GOOD + f'[sync]\nmode = "diloco"\nquorum = {len(dcs)}\ngrace_s = 0.5\n')
    c = load_cluster(path)
    assert (c.sync.quorum, c.sync.grace_s) == (len(dcs), 0.5)
    path.write_text(to_toml(c))
    assert load_cluster(path) == c
    with pytest.raises(ClusterFileError, match=re.escape(
            f"[sync] quorum = {len(dcs) + 1} is more than the cluster's {len(dcs)} DCs")):
        parse_cluster(tomllib.loads(GOOD + f'[sync]\nmode = "hfa"\nquorum = {len(dcs) + 1}\n'),
                      source="c.toml")


def test_relative_paths_of_a_cluster_built_in_code_are_taken_from_a_folder(tmp_path):
    """The launcher writes a cluster built in code (``--dcs 2 --checkpoint ckpt.npz``, the
    bench) to a temporary folder, and its processes read paths relative to the file's
    folder: it makes them absolute from the folder it runs in first."""
    from netstorm.geoserver.config.cluster import absolute_paths
    config = pseudo_cluster(2, 1, 9000, checkpoint="ckpt.npz", resume="/abs/r.npz")
    moved = absolute_paths(config, tmp_path)
    assert moved.checkpoint == str(tmp_path / "ckpt.npz") and moved.resume == "/abs/r.npz"
    assert absolute_paths(moved, "/elsewhere") == moved        # absolute ones stay
