"""``netstorm-launch --check --ssh`` against real ssh hosts (one sshd on 127.0.0.1, .2 and
.3, tests/ssh_hosts.py): every host answers over ssh, its fixed ports are bound and dialled
from the others; a port in use is named and fails the check; nothing is left running. The
socket-free logic is in tests/unit/test_launcher_preflight.py, the firewall in
tests/cluster/test_multihost_firewall.py."""

import socket

import pytest
from launching import free_port, launch
from ssh_hosts import SshHosts


@pytest.fixture(scope="module")
def ssh_hosts(tmp_path_factory):
    hosts = SshHosts(tmp_path_factory.mktemp("sshd"))
    yield hosts
    hosts.close()


def cluster_text(port: int, workers_from: int, ssh: str) -> str:
    """The scheduler and DC a on 127.0.0.1, DC b's server on .2 and its workers on .3."""
    return f"""
[scheduler]
host = "127.0.0.1"
port = {port}

[[dc]]
name = "a"
host = "127.0.0.1"
server_port = {port + 1}
workers = 1

[[dc]]
name = "b"
host = "127.0.0.2"
server_port = {port + 1}
bulk_port = {port + 2}
workers = 2
worker_hosts = ["127.0.0.3"]
worker_ports = "{workers_from}-{workers_from + 2}"
""" + ssh


def test_check_over_ssh_reaches_every_host_and_names_a_port_in_use(ssh_hosts, tmp_path):
    port, workers_from = free_port(), free_port()
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_text(port, workers_from, ssh_hosts.ssh_table()))
    run = launch(["--cluster", path, "--check", "--ssh"], [], tmp_path, timeout=60)
    assert run.code == 0, run.output[-3000:]
    for host in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
        assert f"[check] host {host} answered (ssh {host};" in run.output, run.output
    assert f"listens 127.0.0.3:{workers_from}-{workers_from + 2}" in run.output
    assert "[check] ok: 3 host(s) reached" in run.output
    # DC a's bulk port is left random and dialled from 127.0.0.2: warned about, naming the
    # field; a's worker's random port is dialled from its own host only: not
    warnings = [l for l in run.output.splitlines() if "warning:" in l]
    assert len(warnings) == 1, run.output
    assert "bulk a on 127.0.0.1 listens on a random port that processes on 127.0.0.2 " \
        "dial" in warnings[0]
    assert "fix it with DC 'a' bulk_port" in warnings[0]
    with socket.socket() as held:       # b's server port taken on 127.0.0.2
        held.bind(("127.0.0.2", port + 1))
        held.listen()
        run = launch(["--cluster", path, "--check", "--ssh"], [], tmp_path, timeout=60)
    assert run.code == 1, run.output[-3000:]
    assert (f"problem: server b on 127.0.0.2: cannot bind 127.0.0.2:{port + 1}: in use: "
            f"{port + 1} (Address already in use) (DC 'b' server_port)") in run.output
    assert "[check] FAILED: 1 problem(s)" in run.output
    assert not ssh_hosts.sessions()
