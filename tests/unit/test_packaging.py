"""Packaging (setup.cfg): one ``netstorm`` namespace over the repository's folders, package
data, no import-path tricks; and a non-editable install that works from another directory."""

import configparser
import pytest
from launching import REPO

FOLDERS = {"netstorm": "netstorm", "netstorm.geoserver": "geoserver",
           "netstorm.kvstore": "kvstore", "netstorm.scheduler": "scheduler"}


def _options():
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    packages = config["options"]["packages"].split()
    package_dir = dict(line.split(" = ") for line in
                       config["options"]["package_dir"].strip().splitlines())
    return packages, package_dir


def test_every_package_folder_is_installed_under_netstorm():
    packages, package_dir = _options()
    assert package_dir == FOLDERS
    found = []
    for name, folder in FOLDERS.items():
        for init in sorted((REPO / folder).rglob("__init__.py")):
            relative = init.parent.relative_to(REPO / folder).parts
            found.append(".".join((name, *relative)))
    assert sorted(packages) == sorted(found), "setup.cfg [options] packages must list these"
    assert all(p == "netstorm" or p.startswith("netstorm.") for p in packages)


def _parsers(main, monkeypatch) -> list:
    """Every parser ``main(['--help'])`` builds, sub-command parsers included."""
    import argparse
    seen = []
    original = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        seen.append(self)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(SystemExit):
        main(["--help"])
    parsers, todo = [], list(seen)
    while todo:
        parser = todo.pop()
        parsers.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(action.choices.values())
    return parsers


@pytest.mark.parametrize("module", ["netstorm.launcher.cli", "netstorm.bench.cli",
                                    "netstorm.wan.cli", "netstorm.launcher.keygen"])
def test_every_command_line_flag_has_help_text(module, monkeypatch, capsys):
    import importlib
    parsers = _parsers(importlib.import_module(module).main, monkeypatch)
    missing = [f"{parser.prog}: {'/'.join(action.option_strings) or action.dest}"
               for parser in parsers for action in parser._actions
               if not action.help and not action.option_strings == ["-h", "--help"]
               ]
    assert parsers and not missing, missing
