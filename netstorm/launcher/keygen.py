"""Make CURVE keys for a cluster file: one key pair for the scheduler and one per DC.

    netstorm-keygen cluster.toml                 # or: python scripts/keygen.py cluster.toml
    netstorm-keygen cluster.toml --keys-dir /etc/netstorm/keys

Writes each secret key to its own file in the keys folder (readable by its owner only) and
appends a ``[security]`` table with every public key to the cluster file. Copy the cluster
file to every host, and to each host only the secret keys of the DCs (and of the scheduler)
it runs: ``dc-NAME.key_secret``, ``scheduler.key_secret``. A file that already has a
``[security]`` table is left alone.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster, read_toml
from netstorm.geoserver.config.cluster_toml import security_toml
from netstorm.geoserver.config.keys import SecurityError, generate_cluster_keys, key_file_name

__all__ = ["keygen", "main"]


def keygen(cluster_file, keys_dir=None) -> list:
    """Make the keys of ``cluster_file`` and add them to it; the secret key files written.
    :class:`ClusterFileError` or :class:`SecurityError` if the file is unusable, already
    has a ``[security]`` table, or a key file exists."""
    path = Path(cluster_file)
    config = load_cluster(path)
    if "security" in read_toml(path, ClusterFileError, "cluster file"):
        raise ClusterFileError(f"{path} already has a [security] table; remove it to make "
                               f"new keys (and the old secret key files)")
    folder = Path(keys_dir) if keys_dir else path.parent / f"{path.stem}-keys"
    names = [dc.name for dc in config.dcs]
    for name in ["", *names]:
        if (folder / key_file_name(name)).exists():
            raise SecurityError(f"{folder / key_file_name(name)} exists; remove it (or "
                                f"choose another --keys-dir) to make new keys")
    security = generate_cluster_keys(names, folder)
    try:     # the file names its keys folder relative to itself when it can
        shown = os.path.relpath(folder.resolve(), path.parent.resolve())
    except ValueError:
        shown = str(folder.resolve())
    lines = ["", "# CURVE keys, made by netstorm-keygen: every node admits only these keys"]
    lines += security_toml(replace(security, secret_keys=shown))
    with path.open("a", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    load_cluster(path)         # what was written reads back
    return [folder / key_file_name(name) for name in ["", *names]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="netstorm-keygen", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cluster", help="cluster file (TOML) to add the public keys to")
    parser.add_argument("--keys-dir", default=None,
                        help="folder for the secret keys (default: CLUSTER-keys beside it)")
    args = parser.parse_args(argv)
    try:
        written = keygen(args.cluster, args.keys_dir)
    except (ClusterFileError, SecurityError) as exc:
        print(f"keygen: {exc}", file=sys.stderr)
        return 2
    print(f"keygen: added the public keys to {args.cluster}; secret keys:")
    for path in written:
        print(f"  {path}")
    print("keygen: give each host only the secret keys of the DCs (and scheduler) it runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
