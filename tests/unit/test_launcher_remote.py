"""netstorm/launcher/remote.py: the far end of --ssh checks what it is sent."""
import json
import os
import stat

import pytest

from netstorm.launcher.remote import BUNDLE_VERSION, BundleError, RawLines, parse_bundle, \
    write_files

GOOD = {"version": BUNDLE_VERSION, "host": "10.0.0.1", "cluster": "[scheduler]\n",
        "keys": {"dc-eu.key_secret": "k", "scheduler.key_secret": "s"},
        "command": ["python", "t.py"], "env": {"OMP_NUM_THREADS": "1"}, "workdir": "/w",
        "as_dist_sync": False}


def encoded(**changes) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def test_a_good_bundle_parses():
    assert parse_bundle(encoded()) == GOOD


@pytest.mark.parametrize("line, message", [
    (b"not json", "the launching host sent no bundle"),
    (b"[1]", "not a JSON object"),
    (encoded(version=2), "bundle version 2, this host understands 1"),
    (encoded(version=True), "field 'version' must be int"),
    (encoded(host=None), "field 'host' must be str"),
    (encoded(command=[]), "'command' must be a non-empty list of strings"),
    (encoded(command=["a", 1]), "'command' must be a non-empty list of strings"),
    (encoded(keys={"../../etc/passwd": "x"}), "is not a secret key file name"),
    (encoded(keys={"dc-eu.key_secret": 1}), "is not a secret key file name"),
    (encoded(env={"A=B": "x"}), "is not an environment variable"),
    (encoded(env={"A": 1}), "is not an environment variable"),
    (encoded(as_dist_sync="yes"), "field 'as_dist_sync' must be bool"),
])
def test_bad_bundles_are_refused_naming_the_field(line, message):
    with pytest.raises(BundleError, match=message):
        parse_bundle(line)


def test_files_are_written_with_private_keys(tmp_path):
    path = write_files(GOOD, tmp_path)
    assert path.read_text() == "[scheduler]\n"
    key = tmp_path / "keys" / "dc-eu.key_secret"
    assert key.read_text() == "k" and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700


def test_raw_lines_split_lines_across_reads_and_bound_them():
    read, write = os.pipe()
    os.write(write, b'{"a": 1}\n{"stop"')
    os.write(write, b': "x"}\n' + b"z" * 50)
    os.close(write)
    lines = RawLines(read)
    assert lines.readline(1000) == b'{"a": 1}\n'
    assert lines.readline(1000) == b'{"stop": "x"}\n'
    assert lines.readline(20) == b"z" * 20
    assert lines.readline(1000) == b"z" * 30
    assert lines.readline(1000) == b""
    os.close(read)
