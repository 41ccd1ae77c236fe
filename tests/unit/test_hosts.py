"""geoserver/config/hosts.py: addresses, bind vs advertised, the [ssh] table."""
import pytest

from netstorm.geoserver.config.hosts import SshConfig, parse_ssh, reachable, resolve_host


class Bad(ValueError):
    pass


def test_resolve_host_takes_addresses_and_names_and_refuses_garbage():
    assert resolve_host("10.1.2.3", "f", Bad) == "10.1.2.3"
    assert resolve_host("localhost", "f", Bad) == "127.0.0.1"
    with pytest.raises(Bad, match="f: host 'a b' is neither an IP address nor a host name"):
        resolve_host("a b", "f", Bad)
    with pytest.raises(Bad, match="does not resolve"):
        resolve_host("no-such-host.invalid", "f", Bad)


def test_reachable_needs_an_advertised_address_for_a_wildcard_bind():
    assert reachable("10.0.0.1", "", "f", Bad) == "10.0.0.1"
    assert reachable("0.0.0.0", "203.0.113.5", "f", Bad) == "203.0.113.5"
    with pytest.raises(Bad, match="binds every interface: give 'advertise'"):
        reachable("0.0.0.0", "", "f", Bad)
    with pytest.raises(Bad, match="advertise = '0.0.0.0' is not an address"):
        reachable("10.0.0.1", "0.0.0.0", "f", Bad)


def test_ssh_table_parses_and_builds_the_client_command():
    ssh = parse_ssh({"user": "ml", "port": 2222, "identity": "/k", "options": ["-4"],
                     "aliases": {"10.0.0.1": "eu-gw", "10.0.0.2": "root@us"}}, "f", Bad)
    assert ssh.destination("10.0.0.1") == "ml@eu-gw"
    assert ssh.destination("10.0.0.2") == "root@us"
    assert ssh.destination("10.0.0.3") == "ml@10.0.0.3"
    argv = ssh.argv("10.0.0.1")
    assert argv[0] == "ssh" and "BatchMode=yes" in argv and argv[-1] == "ml@eu-gw"
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-i") + 1] == "/k"
    assert argv[-2] == "-4"
    assert SshConfig().argv("h")[-1] == "h" and "-i" not in SshConfig().argv("h")
    assert SshConfig().to_params() == {}
    assert ssh.to_params()["aliases"] == {"10.0.0.1": "eu-gw", "10.0.0.2": "root@us"}


@pytest.mark.parametrize("table, message", [
    ({"usr": "x"}, "unknown field 'usr'"),
    ({"port": 0}, "port must be an integer in 1..65535"),
    ({"port": True}, "port must be an integer"),
    ({"options": "-4"}, "options must be a list of strings"),
    ({"env": [1]}, "env must be a list of strings"),
    ({"python": 3}, "python must be a string"),
    ({"aliases": {"a": ""}}, "aliases must map host addresses to ssh destinations"),
    ([], "must be a table"),
])
def test_bad_ssh_tables_are_refused_naming_the_field(table, message):
    with pytest.raises(Bad, match=message):
        parse_ssh(table, "f [ssh]", Bad)
