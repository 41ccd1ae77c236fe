"""netstorm.__version__ (the installed distribution's, else setup.cfg's) and ``--version`` on
every command-line tool: each prints its name and setup.cfg's version and exits 0."""
import configparser
import importlib
from importlib import metadata
from pathlib import Path

import pytest

import netstorm

REPO = Path(__file__).resolve().parents[2]


def setup_cfg_version() -> str:
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    return parser["metadata"]["version"]


def test_the_version_is_setup_cfg_s():
    assert netstorm.__version__ == setup_cfg_version()
    assert "__version__" in netstorm.__all__


def test_a_checkout_never_installed_reads_setup_cfg(monkeypatch, tmp_path):
    def not_installed(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", not_installed)
    beside = (Path(netstorm.__file__).resolve().parent.parent / "setup.cfg").exists()
    assert netstorm._installed_version() == \
        (setup_cfg_version() if beside else netstorm.UNKNOWN_VERSION)   # a checkout's
    other = tmp_path / "setup.cfg"
    other.write_text("[metadata]\nname = something-else\nversion = 9.9\n")
    assert netstorm._installed_version(other) == netstorm.UNKNOWN_VERSION
    assert netstorm._installed_version(tmp_path / "none.cfg") == netstorm.UNKNOWN_VERSION
    other.write_text("not an ini file at all [")
    assert netstorm._installed_version(other) == netstorm.UNKNOWN_VERSION
    other.write_text("[metadata]\nname = netstorm\nversion = 2.3.4\n")
    assert netstorm._installed_version(other) == "2.3.4"


@pytest.mark.parametrize("module, prog", [
    ("netstorm.launcher.cli", "netstorm-launch"), ("netstorm.bench.cli", "netstorm-bench"),
    ("netstorm.wan.cli", "netstorm-wan"), ("netstorm.launcher.keygen", "netstorm-keygen"),
    ("netstorm.launcher.status_cli", "netstorm-status"),
    ("netstorm.deploy.cli", "netstorm-deploy")])
def test_every_tool_prints_its_name_and_the_version(capsys, module, prog):
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"{prog} {setup_cfg_version()}\n"
