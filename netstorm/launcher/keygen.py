"""Make CURVE keys for a cluster file: one key pair for the scheduler and one per DC.

    netstorm-keygen cluster.toml                 # or: python scripts/keygen.py cluster.toml
    netstorm-keygen cluster.toml --keys-dir /etc/netstorm/keys

Writes each secret key to its own file in the keys folder (readable by its owner only) and
adds a ``[security]`` table with every public key at the end of the cluster file. Copy the
cluster file to every host, and to each host only the secret keys of the DCs (and of the
scheduler) it runs: ``dc-NAME.key_secret``, ``scheduler.key_secret``. A file that already has
a ``[security]`` table is left alone. The cluster file is replaced at once (a new file beside
it, renamed over it) after the new text was read back and validated: on any failure it is
left as it was, byte for byte, and no secret key file stays behind.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import tomllib
from pathlib import Path

import netstorm
from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster
from netstorm.geoserver.config.cluster_toml import checked_toml, security_toml
from netstorm.geoserver.config.keys import SecurityConfig, SecurityError, key_file_name, \
    new_cluster_keys, public_keys, remove_files, write_cluster_keys
from netstorm.geoserver.config.uncaught import debug_wanted, report_uncaught

__all__ = ["keygen", "main", "replace_file"]

PROG = "netstorm-keygen"
HEADER = "# CURVE keys, made by netstorm-keygen: every node admits only these keys\n"


def replace_file(path: Path, data: bytes) -> None:
    """Make ``data`` the content of ``path`` at once: written to a new file in the same
    folder (same permissions), flushed to disk, then renamed over ``path``. A failure
    before the rename leaves ``path`` as it was and removes the new file."""
    mode = path.stat().st_mode & 0o7777
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _with_keys(original: bytes, security: SecurityConfig, where: str) -> bytes:
    """The user's file ``original``, untouched, followed by ``security``'s table; read back
    and validated (a ClusterFileError naming ``where`` if it would not be a cluster file)."""
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ClusterFileError(f"{where}: not UTF-8 text ({exc})") from None
    addition = ("" if not text or text.endswith("\n") else "\n") + "\n" + HEADER + \
        security_toml(security)
    checked_toml(text + addition, where)
    return original + addition.encode("utf-8")


def keygen(cluster_file, keys_dir=None) -> list:
    """Make the keys of ``cluster_file`` and add them to it; the secret key files written.
    :class:`ClusterFileError` or :class:`SecurityError` if the file is unusable, already
    has a ``[security]`` table, or a key file exists; the file is then unchanged and no key
    file (nor the keys folder, if this made it) is left."""
    path = Path(cluster_file)
    config = load_cluster(path)
    target = path.resolve()         # a link to the file: the file it points to is replaced
    original = target.read_bytes()
    if "security" in tomllib.loads(original.decode("utf-8")):
        raise ClusterFileError(f"{path} already has a [security] table; remove it to make "
                               f"new keys (and the old secret key files)")
    folder = Path(keys_dir) if keys_dir else path.parent / f"{path.stem}-keys"
    names = [dc.name for dc in config.dcs]
    for name in ["", *names]:
        if (folder / key_file_name(name)).exists():
            raise SecurityError(f"{folder / key_file_name(name)} exists; remove it (or "
                                f"choose another --keys-dir) to make new keys")
    try:     # the file names its keys folder relative to itself when it can
        shown = os.path.relpath(folder.resolve(), target.parent)
    except ValueError:
        shown = str(folder.resolve())
    pairs = new_cluster_keys(names)
    data = _with_keys(original, SecurityConfig(public_keys=public_keys(pairs),
                                               secret_keys=shown), str(path))
    created, written = not folder.exists(), []
    try:
        written = write_cluster_keys(pairs, folder)
        replace_file(target, data)
    except BaseException:
        remove_files(written)
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return written


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except Exception as exc:     # noqa: BLE001 - the last resort: one line, never a traceback
        return report_uncaught(PROG, exc, debug_wanted(argv, os.environ))


def _main(argv: list) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cluster", help="cluster file (TOML) to add the public keys to")
    parser.add_argument("--version", action="version", version=f"{PROG} {netstorm.__version__}")
    parser.add_argument("--keys-dir", default=None,
                        help="folder for the secret keys (default: CLUSTER-keys beside it)")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an unexpected error")
    args = parser.parse_args(argv)
    try:
        written = keygen(args.cluster, args.keys_dir)
    except (ClusterFileError, SecurityError) as exc:
        print(f"keygen: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"keygen: {exc.filename or args.cluster}: {exc.strerror}; the cluster file is "
              f"unchanged", file=sys.stderr)
        return 2
    print(f"keygen: added the public keys to {args.cluster}; secret keys:")
    for path in written:
        print(f"  {path}")
    print("keygen: give each host only the secret keys of the DCs (and scheduler) it runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
