"""netstorm.bench.cli (netstorm-bench): what --plot, --json and the digits need is checked
before a run starts, naming the flag and the extra to install; an error nothing expected is
one line, never a traceback. (The other refusals of parse_args: tests/unit/test_bench.py.)"""

import errno
import sys

import pytest
from netstorm.bench import cli


@pytest.fixture
def never_runs(monkeypatch):
    """cli.run replaced: a test fails if the benchmark itself would start."""
    def run(args):
        raise AssertionError("the run started")
    monkeypatch.setattr(cli, "run", run)


def _refusal(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err, err
    return err.strip().splitlines()[-1]


def test_plot_without_matplotlib_names_the_flag_and_the_extra(monkeypatch, capsys, never_runs,
                                                              tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)      # import matplotlib fails
    line = _refusal(["--plot", str(tmp_path / "out.png")], capsys)
    assert "--plot needs matplotlib" in line and "pip install 'netstorm[bench]'" in line, line


def test_training_on_the_digits_without_scikit_learn_names_the_extra(monkeypatch, capsys,
                                                                     never_runs, tmp_path):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    line = _refusal(["--mode", "train", "--workload", "cnn-digits"], capsys)
    assert "--workload cnn-digits (--data digits) needs scikit-learn" in line, line
    assert "netstorm[bench]" in line
    args = cli.parse_args(["--mode", "train", "--data", str(tmp_path)])  # IDX files: no sklearn
    assert args.data == str(tmp_path)


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_an_output_that_cannot_be_written_is_refused_before_the_run(flag, capsys, never_runs,
                                                                    tmp_path):
    missing = tmp_path / "no-such-folder" / "out.x"
    assert _refusal([flag, str(missing)], capsys).endswith(
        f"{flag} {missing}: folder {missing.parent} does not exist")
    assert _refusal([flag, str(tmp_path)], capsys).endswith(f"{flag} {tmp_path}: is a folder")


def test_a_read_only_output_folder_is_refused(monkeypatch, capsys, never_runs, tmp_path):
    """Root may write anywhere os.access says; a read-only file system refuses the probe."""
    def refuse(**kwargs):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(cli.tempfile, "NamedTemporaryFile", refuse)
    line = _refusal(["--json", str(tmp_path / "out.json")], capsys)
    assert line.endswith(f"cannot write in {tmp_path}: Read-only file system"), line


def test_writable_outputs_pass_and_leave_no_probe_file(tmp_path):
    args = cli.parse_args(["--json", str(tmp_path / "o.json"), "--plot", str(tmp_path / "o.png")])
    assert args.json and args.plot and list(tmp_path.iterdir()) == []


def test_an_unexpected_error_is_one_line_naming_its_type(monkeypatch, capsys):
    def run(args):
        raise ValueError("the topology has no DC named 'x'")
    monkeypatch.setattr(cli, "run", run)
    assert cli.main([]) == 1
    assert capsys.readouterr().err == \
        "netstorm-bench: error: ValueError: the topology has no DC named 'x'\n"
