"""Where a cluster's processes run and how they are reached: host addresses as a cluster
file gives them, and its ``[ssh]`` table (how ``launch.py --ssh`` reaches every host).

A process *binds* one address and is *reached* at another when they differ (a server behind
NAT binds its private address, or ``0.0.0.0``, and advertises its public one). Host names
are resolved once, when a process reads the file. Pure: nothing here opens a connection.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

__all__ = ["ANY_ADDRESS", "HOSTNAME", "SSH_CONNECT_TIMEOUT_S", "SSH_FIELDS", "SshConfig",
           "parse_ssh", "reachable", "resolve_host"]

HOSTNAME = re.compile(r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
                      r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")   # RFC 1123
ANY_ADDRESS = ("0.0.0.0", "::")     # bindable, never a place to reach a process at
SSH_FIELDS = ("user", "port", "identity", "options", "python", "workdir", "env", "aliases")
SSH_CONNECT_TIMEOUT_S = 10          # a host that does not answer ssh fails this fast


def resolve_host(value: str, where: str, error: type) -> str:
    """An IP address as written, or a host name resolved here to its IPv4 address; a name
    that does not resolve, or that is not a host name at all, raises ``error`` naming it."""
    if value == "localhost":
        return "127.0.0.1"
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if not HOSTNAME.fullmatch(value):
        raise error(f"{where}: host {value!r} is neither an IP address nor a host name")
    try:
        infos = socket.getaddrinfo(value, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise error(f"{where}: host name {value!r} does not resolve on this host "
                    f"({exc})") from None
    return str(infos[0][4][0])


def reachable(bind: str, advertise: str, where: str, error: type) -> str:
    """The address peers dial for a process binding ``bind`` and advertising ``advertise``
    ("": the bind address). A wildcard bind needs an advertised address."""
    if advertise in ANY_ADDRESS:
        raise error(f"{where}: advertise = {advertise!r} is not an address peers can reach")
    if not advertise and bind in ANY_ADDRESS:
        raise error(f"{where}: host = {bind!r} binds every interface: give 'advertise', "
                    f"the address the other nodes reach this one at")
    return advertise or bind


@dataclass(frozen=True)
class SshConfig:
    """``[ssh]``: how the launcher reaches every host with ``--ssh`` (OpenSSH's client).

    ``aliases`` maps a host address of the file to the ssh destination that reaches it
    (``"10.0.0.7" = "alice@eu-gw"``); ``python`` and ``workdir`` are the remote Python
    (with netstorm installed) and folder ("": the launcher's own); ``env`` names variables
    of the launcher's environment forwarded to every remote process (besides ``MXNET_*``
    and ``OMP_*``, always forwarded)."""

    user: str = ""
    port: int = 22
    identity: str = ""
    options: tuple = ()
    python: str = ""
    workdir: str = ""
    env: tuple = ()
    aliases: tuple = ()     # ((address, destination), ...)

    def destination(self, host: str) -> str:
        """The ssh destination of ``host``: its alias, else ``user@host``."""
        target = dict(self.aliases).get(host, host)
        return f"{self.user}@{target}" if self.user and "@" not in target else target

    def argv(self, host: str) -> list:
        """The ssh client's command line up to (not including) the remote command. Batch
        mode: a host that asks for a password fails at once instead of waiting for one."""
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
                "-p", str(self.port)]
        if self.identity:
            argv += ["-i", self.identity]
        return argv + list(self.options) + [self.destination(host)]

    def to_params(self) -> dict:
        """The fields that differ from the defaults, as a cluster file writes them."""
        params = {"user": self.user, "port": self.port, "identity": self.identity,
                  "options": list(self.options), "python": self.python,
                  "workdir": self.workdir, "env": list(self.env),
                  "aliases": dict(self.aliases)}
        return {k: v for k, v in params.items() if v != getattr(SshConfig(), k) and v != [] and
                v != {}}


def parse_ssh(raw, where: str, error: type) -> SshConfig:
    """The ``[ssh]`` table ``raw``; any wrong type or unknown field raises ``error``."""
    if not isinstance(raw, dict):
        raise error(f"{where}: must be a table, got {raw!r}")
    unknown = sorted(set(raw) - set(SSH_FIELDS))
    if unknown:
        raise error(f"{where}: unknown field {unknown[0]!r}; known: {', '.join(SSH_FIELDS)}")
    kwargs = {}
    for key in ("user", "identity", "python", "workdir"):
        if key in raw:
            if not isinstance(raw[key], str):
                raise error(f"{where}: {key} must be a string, got {raw[key]!r}")
            kwargs[key] = raw[key]
    if "port" in raw:
        port = raw["port"]
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise error(f"{where}: port must be an integer in 1..65535, got {port!r}")
        kwargs["port"] = port
    for key in ("options", "env"):
        if key in raw:
            items = raw[key]
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise error(f"{where}: {key} must be a list of strings, got {items!r}")
            kwargs[key] = tuple(items)
    if "aliases" in raw:
        aliases = raw["aliases"]
        if not isinstance(aliases, dict) or \
                not all(isinstance(v, str) and v for v in aliases.values()):
            raise error(f"{where}: aliases must map host addresses to ssh destinations "
                        f"(strings), got {aliases!r}")
        kwargs["aliases"] = tuple(sorted(aliases.items()))
    return SshConfig(**kwargs)
