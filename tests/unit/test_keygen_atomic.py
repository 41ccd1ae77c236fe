"""netstorm-keygen's writes: the user's cluster file is replaced at once, after the new
text read back as a valid cluster file; any failure leaves it byte-identical and no secret key
file behind; the file keeps its permissions and a link to it stays a link."""
import os
import stat

import pytest

from netstorm.launcher import keygen

FILE = """\
[scheduler]   # the user's comment
host = "127.0.0.1"
port = 9000
[[dc]]
name = "eu-west_2"
host = "127.0.0.1"
server_port = 0
workers = 1
[[dc]]
name = "us"
host = "127.0.0.1"
server_port = 0
workers = 1"""          # no newline at the end


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("step", ["os.replace", "os.fsync", "os.chmod"])
def test_a_failure_while_writing_leaves_the_file_byte_identical_and_no_key(tmp_path,
                                                                            monkeypatch, capsys,
                                                                            step):
    path = tmp_path / "cluster.toml"
    path.write_text(FILE)
    before = _files(tmp_path)

    def fail(*args):
        raise OSError(28, "No space left on device", str(path))
    monkeypatch.setattr(f"netstorm.launcher.keygen.{step}", fail)
    assert keygen.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: No space left on device; the cluster file is unchanged" in err
    assert _files(tmp_path) == before            # no key, no temporary file
    assert not (tmp_path / "cluster-keys").exists()


def test_a_key_that_cannot_be_written_leaves_no_other_key_and_the_file_alone(tmp_path,
                                                                          monkeypatch):
    from netstorm.geoserver.config import keys
    path = tmp_path / "cluster.toml"
    path.write_text(FILE)
    real, calls = keys.write_key_pair, []

    def third_fails(directory, principal, pair):
        calls.append(principal)
        if len(calls) == 3:
            raise OSError(5, "Input/output error")
        return real(directory, principal, pair)
    monkeypatch.setattr(keys, "write_key_pair", third_fails)
    assert keygen.main([str(path)]) == 2
    assert path.read_text() == FILE and not (tmp_path / "cluster-keys").exists()


def test_the_new_file_keeps_the_users_text_mode_and_link(tmp_path):
    real = tmp_path / "real.toml"
    real.write_text(FILE)
    os.chmod(real, 0o640)
    link = tmp_path / "cluster.toml"
    link.symlink_to(real)
    keygen.keygen(link)
    assert link.is_symlink() and stat.S_IMODE(real.stat().st_mode) == 0o640
    text = real.read_text()
    assert text.startswith(FILE + "\n\n# CURVE keys, made by netstorm-keygen")
    assert "[security.dc_keys]\neu-west_2 = " in text
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
