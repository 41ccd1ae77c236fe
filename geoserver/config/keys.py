"""The cluster's keys as data: CURVE key pairs and their files, the public keys a cluster
file lists (``[security]``), checked when read. Pure apart from key files: no sockets.

Each DC has one key pair, shared by its server and its workers (a DC is one trust domain);
the scheduler has its own. The cluster file lists every public key; each host keeps only its
own secret keys, in ZeroMQ's certificate format, readable by its owner only
(:func:`write_key_pair`). How the keys are used on sockets (the ZAP handler, credentials) is
:mod:`netstorm.geoserver.core.security`'s business.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.utils import z85

__all__ = ["BULK_CIPHERS", "INSECURE_WARNING", "KEY_CHARS", "KeyPair", "SCHEDULER_PRINCIPAL",
           "SecurityConfig", "SecurityError", "check_key", "describe", "generate_cluster_keys",
           "key_file_name", "new_cluster_keys", "public_keys", "read_key_pair", "remove_files",
           "write_cluster_keys", "write_key_pair"]

SCHEDULER_PRINCIPAL = ""            # the scheduler's NodeInfo.dc is "" as well
KEY_CHARS = 40                      # a Curve25519 key in Z85


class SecurityError(ValueError):
    """Keys are missing, malformed or do not match; the text names the file or field."""


def check_key(text, where: str) -> bytes:
    """``text`` as a Z85 public or secret key (bytes); :class:`SecurityError` naming
    ``where`` if it is not one."""
    if not isinstance(text, (str, bytes)):
        raise SecurityError(f"{where}: a key must be a string, got {type(text).__name__}")
    key = text.encode("ascii", "replace") if isinstance(text, str) else text
    if len(key) != KEY_CHARS:
        raise SecurityError(f"{where}: a key has {KEY_CHARS} characters (Z85), got {len(key)}")
    try:
        z85.decode(key)
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise SecurityError(f"{where}: not a Z85 key ({exc})") from exc
    return key


@dataclass(frozen=True)
class KeyPair:
    public: bytes
    secret: bytes

    @classmethod
    def generate(cls) -> "KeyPair":
        public, secret = zmq.curve_keypair()
        return cls(public, secret)


def key_file_name(principal: str) -> str:
    """The secret key file of a principal: ``scheduler.key_secret`` or ``dc-NAME.key_secret``
    (a DC may be called ``scheduler``)."""
    return ("scheduler" if principal == SCHEDULER_PRINCIPAL else f"dc-{principal}") \
        + ".key_secret"


def write_key_pair(directory, principal: str, pair: KeyPair) -> Path:
    """Write ``pair`` as a ZeroMQ certificate, readable by its owner only; an existing file
    is never overwritten. Returns the path."""
    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / key_file_name(principal)
    text = (f"#   netstorm secret key of {describe(principal)}: keep it on its hosts only\n"
            f"metadata\ncurve\n    public-key = \"{pair.public.decode()}\"\n"
            f"    secret-key = \"{pair.secret.decode()}\"\n")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise SecurityError(f"{path} exists: remove it to make new keys") from exc
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return path


def read_key_pair(path, field: str = "") -> KeyPair:
    """The key pair in the certificate ``path``; :class:`SecurityError` naming the file and
    ``field``, the setting that named it (a missing folder or file is said as such: ZeroMQ
    only calls it an invalid certificate)."""
    path, named = Path(path), f" ({field})" if field else ""
    if not path.parent.is_dir():
        raise SecurityError(f"the secret key folder {path.parent} does not exist{named}: "
                            f"give this host the secret keys 'netstorm-keygen' made")
    if not path.is_file():
        raise SecurityError(f"cannot read the secret key {path}: no such file{named}")
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise SecurityError(f"cannot read the secret key {path}: {exc}") from exc
    if secret is None:
        raise SecurityError(f"{path} holds no secret key")
    pair = KeyPair(check_key(public, str(path)), check_key(secret, str(path)))
    if zmq.curve_public(pair.secret) != pair.public:
        raise SecurityError(f"{path}: its public key does not belong to its secret key")
    return pair


BULK_CIPHERS = ("aegis256", "curve")


@dataclass(frozen=True)
class SecurityConfig:
    """The cluster file's ``[security]`` table. ``curve`` False turns encryption and
    authentication off (every process then logs a warning). ``public_keys``: principal ->
    Z85 public key, for the scheduler and every DC; ``secret_keys``: the directory holding
    this host's secret key files (empty: none given)."""

    curve: bool = True
    public_keys: tuple = ()          # ((principal, key), ...), principal "" = scheduler
    secret_keys: str = ""            # as read: relative to the cluster file's folder
    # chunks between DC servers: sealed with AEGIS-256 on a plain socket under per-link keys
    # sent over CURVE ("aegis256"), or on CURVE like everything else ("curve"); with curve
    # off everything is plain and this is ignored (docs/security.md, "Bulk chunks")
    bulk_cipher: str = "aegis256"

    @property
    def bulk(self) -> bool:
        """Whether servers seal chunks to each other on the bulk channel."""
        return self.curve and self.bulk_cipher == "aegis256"

    @property
    def keys(self) -> dict:
        return dict(self.public_keys)


def describe(principal: str) -> str:
    """A principal as a person would name it: "the scheduler" or "DC NAME"."""
    return "the scheduler" if principal == SCHEDULER_PRINCIPAL else f"DC {principal}"


INSECURE_WARNING = ("CURVE is off ([security] curve = false): traffic is neither encrypted "
                    "nor authenticated; anyone who can reach this node's port can read the "
                    "model and forge any message")


def new_cluster_keys(dcs) -> dict:
    """A fresh key pair for the scheduler and each of ``dcs``: ``{principal: KeyPair}``,
    in memory only."""
    return {principal: KeyPair.generate() for principal in (SCHEDULER_PRINCIPAL, *dcs)}


def public_keys(pairs: dict) -> tuple:
    """``pairs``' public halves as :attr:`SecurityConfig.public_keys`."""
    return tuple(sorted((principal, pair.public.decode()) for principal, pair in pairs.items()))


def write_cluster_keys(pairs: dict, directory) -> list:
    """Write the secret half of every pair of ``pairs`` (:func:`write_key_pair`) to
    ``directory``: all of them, or none (a failure removes those written before it and
    raises). The paths written, in ``pairs``' order. O(pairs)."""
    written = []
    try:
        for principal, pair in pairs.items():
            written.append(write_key_pair(directory, principal, pair))
    except BaseException:
        remove_files(written)
        raise
    return written


def remove_files(paths) -> None:
    """Remove ``paths`` (those already gone are skipped): undoing a write that failed."""
    for path in paths:
        Path(path).unlink(missing_ok=True)


def generate_cluster_keys(dcs, directory) -> SecurityConfig:
    """A fresh key pair for the scheduler and each of ``dcs``, the secret halves written to
    ``directory`` (:func:`write_cluster_keys`); the :class:`SecurityConfig` listing them."""
    pairs = new_cluster_keys(dcs)
    write_cluster_keys(pairs, directory)
    return SecurityConfig(curve=True, public_keys=public_keys(pairs),
                          secret_keys=str(directory))
