"""tests/unit/: one process, no sockets, no child processes. An autouse fixture makes every
attempt to open a socket or start a process fail the test at once, naming what it tried, so a
test that needs them is noticed and moved to tests/cluster/ (`scripts/test.sh -m unit` runs
this folder alone, in under two minutes)."""
from __future__ import annotations

import os
import socket
import subprocess

import pytest
import zmq


class UnitTestEscaped(AssertionError):
    """A unit test tried to open a socket or start a process."""


@pytest.fixture(autouse=True)
def _no_sockets_or_processes(monkeypatch):
    def refuse(what):
        def refused(*args, **kwargs):
            raise UnitTestEscaped(f"a unit test may not {what}: move it to tests/cluster/")
        return refused

    monkeypatch.setattr(socket.socket, "__init__", refuse("open a socket"))
    monkeypatch.setattr(zmq.Context, "socket", refuse("open a ZeroMQ socket"))
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("start a process"))
    monkeypatch.setattr(os, "fork", refuse("fork"))
    yield


@pytest.fixture(params=["python", "native"])
def dataplane(request, monkeypatch):
    """Run a data-path test on both implementations with the same assertions: the Python
    path (the specification) and the compiled data plane (geoserver/native/). Servers built
    by the test follow it, and so do :func:`fakes.exchanges`."""
    import fakes
    from netstorm.geoserver.server import native_plane
    if request.param == "python":
        monkeypatch.setattr(native_plane, "choose", lambda settings: (None, "the test's"))
    else:
        module, why = native_plane.core_module()
        assert module is not None, f"the compiled data plane must be built here: {why}"
    monkeypatch.setitem(fakes.DATAPLANE, "name", request.param)
    return request.param
