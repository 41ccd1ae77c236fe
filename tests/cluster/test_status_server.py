"""scheduler/status_server.py over real sockets: the page, its script and the JSON, read-only;
a port already taken named; netstorm-status naming an address where nothing answers; and a
cluster whose status port is taken fails at once, naming it."""
import json
import socket
import sys
import urllib.error
import urllib.request

import pytest

from launching import free_port, launch
from netstorm.launcher import status_cli
from netstorm.scheduler.status_server import StatusServer, StatusServerError

SNAPSHOT = json.dumps({"version": 1, "state": "training"}).encode()


@pytest.fixture
def server():
    served = StatusServer("127.0.0.1", free_port(), lambda: SNAPSHOT).start()
    yield served
    served.close()


def get(url: str, method: str = "GET"):
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_the_page_its_script_and_the_snapshot_are_served(server):
    code, headers, body = get(server.address)
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<script src="status.js"></script>' in body
    assert b"http://" not in body and b"https://" not in body     # nothing from elsewhere
    code, headers, body = get(server.address + "status.js")
    assert code == 200 and headers["Content-Type"].startswith("text/javascript")
    assert body.count(b"fetch(") == 1 and b'fetch("status.json"' in body
    code, headers, body = get(server.address + "status.json?t=1")
    assert (code, body) == (200, SNAPSHOT) and headers["Cache-Control"] == "no-store"
    assert headers["Content-Type"] == "application/json"


def test_it_is_read_only_and_serves_nothing_else(server):
    assert get(server.address + "../etc/passwd")[0] == 404
    assert get(server.address + "status.json/x")[0] == 404
    code, _, body = get(server.address + "status.json", method="HEAD")
    assert code == 200 and body == b""
    for method in ("POST", "PUT", "DELETE"):
        assert get(server.address + "status.json", method=method)[0] == 501


def test_a_taken_port_is_named_with_the_field_to_change():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StatusServerError) as caught:
            StatusServer("127.0.0.1", port, lambda: b"{}")
    assert str(caught.value).startswith(f"cannot serve the status page at 127.0.0.1:{port}: ")
    assert "[status] port (or --status-port)" in str(caught.value)


def test_netstorm_status_names_the_address_where_nothing_answers(capsys):
    port = free_port()
    assert status_cli.main(["--address", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"netstorm-status: cannot reach the scheduler's status at "
                          f"http://127.0.0.1:{port}/status.json: ")
    assert "refused" in err.lower() and "Traceback" not in err


def test_a_cluster_whose_status_port_is_taken_fails_naming_it(no_leftovers):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = launch(["--dcs", 1, "--status-port", port, "--timeout", 20],
                     [sys.executable, "-c", "import time; time.sleep(60)"], no_leftovers,
                     timeout=60)
    assert run.code != 0
    assert f"cannot serve the status page at 127.0.0.1:{port}" in run.output, run.output[-3000:]
