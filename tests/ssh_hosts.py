"""Real ssh hosts for the ``--ssh`` launcher tests: one OpenSSH server listening on several
loopback addresses (127.0.0.1, .2, .3: three "hosts" of one machine), with host and client
keys made for the test and removed after it.

OpenSSH comes from Debian's openssh-server and openssh-client, which scripts/test.sh installs
only under CI or NETSTORM_TEST_SYSTEM_PACKAGES=1; a test that uses a fixture named
``ssh_hosts`` runs only then, and otherwise skips naming the opt-in (tests/conftest.py). Nothing
here installs anything.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def ensure_openssh() -> None:
    """RuntimeError naming the packages unless OpenSSH's server and client are installed
    (tests/conftest.py skips or fails the test before, naming the opt-in)."""
    if not (Path(SSHD).exists() and shutil.which("ssh") and shutil.which("ssh-keygen")):
        raise RuntimeError(f"the ssh tests need {SSHD}, ssh and ssh-keygen: Debian's "
                           f"openssh-server and openssh-client (apt-get install openssh-server "
                           f"openssh-client, or NETSTORM_TEST_SYSTEM_PACKAGES=1 bash "
                           f"scripts/test.sh)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SshHosts:
    """An sshd on :data:`ADDRESSES` at one free port, admitting ``client_key``."""

    def __init__(self, folder: Path):
        ensure_openssh()
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            str(folder / name)], check=True)
        (folder / "authorized_keys").write_text((folder / "client_key.pub").read_text())
        self.port = _free_port()
        config = folder / "sshd_config"
        config.write_text("\n".join(
            [f"Port {self.port}"] + [f"ListenAddress {a}" for a in ADDRESSES] +
            [f"HostKey {folder / 'host_key'}",
             f"AuthorizedKeysFile {folder / 'authorized_keys'}",
             "PermitRootLogin prohibit-password", "PasswordAuthentication no",
             "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
             f"PidFile {folder / 'sshd.pid'}", "MaxStartups 30", "MaxSessions 30"]) + "\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)      # privilege separation
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)],
                                     stdout=subprocess.DEVNULL,
                                     stderr=open(folder / "sshd.log", "wb"))
        self._wait_listening()

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.folder / 'sshd.log').read_text()}")
            try:
                socket.create_connection((ADDRESSES[-1], self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("sshd did not listen within 10 s")

    def ssh_table(self) -> str:
        """The cluster file's ``[ssh]`` table reaching these hosts."""
        return (f"[ssh]\nport = {self.port}\nidentity = \"{self.folder / 'client_key'}\"\n"
                f"options = [\"-o\", \"StrictHostKeyChecking=no\", \"-o\", "
                f"\"UserKnownHostsFile=/dev/null\", \"-o\", \"LogLevel=ERROR\"]\n")

    def sessions(self) -> list:
        """The processes running under this sshd's sessions (pids and command lines)."""
        import psutil   # noqa: PLC0415
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        found = []
        for child in children:
            try:
                found.append((child.pid, " ".join(child.cmdline())))
            except psutil.NoSuchProcess:
                pass
        return [(pid, cmd) for pid, cmd in found if not cmd.startswith("sshd")]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
