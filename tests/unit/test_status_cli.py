"""netstorm-status (netstorm/launcher/status_cli.py) without a cluster: where it asks, what it
says when the status is off, unreachable or not netstorm's, --watch's refreshes. HTTP is
replaced by a fake ``urlopen`` (tests/cluster/test_status_page.py asks a live scheduler)."""
import io
import json
import urllib.error
from dataclasses import replace

import pytest

from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.status import StatusConfig
from netstorm.launcher import status_cli
from netstorm.scheduler.status import ClusterStatus


def cluster_file(tmp_path, **status) -> str:
    config = pseudo_cluster(2, 1, 9000)
    if status:
        config = replace(config, status=StatusConfig(**status))
    path = tmp_path / "cluster.toml"
    path.write_text(to_toml(config))
    return str(path)


class Answer(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def served(monkeypatch):
    """A fake urlopen: answers the queued bodies (or raises the queued errors), in turn,
    recording each URL asked."""
    asked, answers = [], []

    def urlopen(url, timeout):
        asked.append(url)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return Answer(answer)
    monkeypatch.setattr(status_cli.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(status_cli.time, "sleep", lambda s: None)
    return asked, answers


def good_body() -> bytes:
    return ClusterStatus(pseudo_cluster(2, 1, 9000), 0.0).json_bytes()


def test_the_address_comes_from_the_files_status_table(tmp_path, served, capsys):
    asked, answers = served
    answers.append(good_body())
    assert status_cli.main(["--cluster", cluster_file(tmp_path, port=8123)]) == 0
    assert asked == ["http://127.0.0.1:8123/status.json"]
    out = capsys.readouterr().out
    assert out.startswith("netstorm cluster at http://127.0.0.1:8123/status.json: starting")


def test_a_wildcard_status_host_is_asked_at_the_schedulers_address(tmp_path, served):
    asked, answers = served
    answers.append(good_body())
    assert status_cli.main(["--cluster", cluster_file(tmp_path, port=8123, host="0.0.0.0")]) == 0
    assert asked == ["http://127.0.0.1:8123/status.json"]


def test_a_cluster_without_a_status_port_is_named_with_how_to_turn_it_on(tmp_path, served,
                                                                         capsys):
    path = cluster_file(tmp_path)
    assert status_cli.main(["--cluster", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"netstorm-status: error: {path}: no [status] port")
    assert "--status-port" in err and "Traceback" not in err and not served[0]


def test_an_unreachable_status_names_the_address_and_exits_1(tmp_path, served, capsys):
    asked, answers = served
    answers.append(urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")))
    assert status_cli.main(["--address", "127.0.0.1:8124"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("netstorm-status: cannot reach the scheduler's status at "
                          "http://127.0.0.1:8124/status.json: Connection refused")


@pytest.mark.parametrize("body, named", [
    (b"<html>hello</html>", "did not answer with JSON"),
    (json.dumps({"version": 1}).encode(), "the answer lacks state, dcs"),
    (urllib.error.HTTPError("u", 404, "Not Found", {}, None), "answered HTTP 404 Not Found")])
def test_an_answer_that_is_not_netstorms_status_is_named(served, capsys, body, named):
    served[1].append(body)
    assert status_cli.main(["--address", "localhost:80"]) == 1
    err = capsys.readouterr().err
    assert "http://localhost:80/status.json" in err and named in err


@pytest.mark.parametrize("argv, named", [
    (["--address", "8080"], "--address '8080': give HOST:PORT"),
    (["--address", "h:0"], "give HOST:PORT"),
    (["--cluster", "/nonexistent/c.toml"], "cannot read cluster file /nonexistent/c.toml")])
def test_a_bad_address_or_file_is_refused_naming_it(served, capsys, argv, named):
    assert status_cli.main(argv) == 2
    assert named in capsys.readouterr().err and not served[0]


@pytest.mark.parametrize("argv, named", [
    ([], "one of the arguments --cluster --address is required"),
    (["--address", "h:1", "--watch", "0"], "--watch must be a number of seconds"),
    (["--address", "h:1", "--count", "-1"], "--count must be 0 or more")])
def test_bad_flags_are_refused_by_argparse(capsys, argv, named):
    with pytest.raises(SystemExit) as stopped:
        status_cli.main(argv)
    assert stopped.value.code == 2 and named in capsys.readouterr().err


def test_watch_refreshes_and_says_an_unreachable_status_then_asks_again(served, capsys):
    asked, answers = served
    answers += [good_body(), urllib.error.URLError(TimeoutError("timed out")), good_body()]
    assert status_cli.main(["--address", "h:1", "--watch", "0.5", "--count", "3"]) == 0
    out = capsys.readouterr().out
    assert len(asked) == 3 and out.count("netstorm cluster at") == 2
    assert "cannot reach the scheduler's status at http://h:1/status.json: timed out" in out
    assert out.count("-- every 0.5 s, Ctrl-C ends --") == 3


def test_json_prints_the_snapshot_as_it_came(served, capsys):
    served[1].append(good_body())
    assert status_cli.main(["--address", "h:1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(good_body())
