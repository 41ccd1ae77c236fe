"""The scheduler's status page over HTTP: ``/`` (one static HTML page), ``/status.js`` (its
script, polling ``/status.json`` every 2 s) and ``/status.json`` (the latest snapshot of
:class:`~netstorm.scheduler.status.ClusterStatus`).

Read-only: GET and HEAD only, nothing a request says changes the scheduler. Served by the
standard library's ``ThreadingHTTPServer`` from a daemon thread; a request only copies the
snapshot's finished bytes (taken under the status's lock), so the scheduler's loop never
waits for a client. The page and its script are package data (``status_page/``): no build
step, no framework, nothing fetched from elsewhere: it works offline.
"""
from __future__ import annotations

import importlib.resources
import logging
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["PAGE_FILES", "StatusServer", "StatusServerError", "page_files"]

log = logging.getLogger("netstorm.scheduler")

PAGE_FILES = {"/": ("index.html", "text/html; charset=utf-8"),
              "/index.html": ("index.html", "text/html; charset=utf-8"),
              "/status.js": ("status.js", "text/javascript; charset=utf-8")}


class StatusServerError(OSError):
    """The status page cannot be served (e.g. its port is taken); the text names the
    address and the ``[status]`` field to change."""


def page_files() -> dict:
    """``{path: (bytes, content type)}``: the page's files, read once from the package."""
    folder = importlib.resources.files("netstorm.scheduler") / "status_page"
    return {path: ((folder / name).read_bytes(), ctype)
            for path, (name, ctype) in PAGE_FILES.items()}


class StatusServer:
    """Serves ``json_bytes()`` (any thread may call it) and the page at ``host:port`` once
    :meth:`start` ran, until :meth:`close`."""

    def __init__(self, host: str, port: int, json_bytes):
        files = page_files()

        class Handler(BaseHTTPRequestHandler):
            server_version = "netstorm-status"
            sys_version = ""

            def do_GET(self):           # noqa: N802 - the stdlib's name
                self._answer(send_body=True)

            def do_HEAD(self):          # noqa: N802
                self._answer(send_body=False)

            def _answer(self, send_body: bool):
                path = self.path.split("?", 1)[0]
                if path == "/status.json":
                    body, ctype = json_bytes(), "application/json"
                elif path in files:
                    body, ctype = files[path]
                else:
                    body, ctype = b"not found\n", "text/plain; charset=utf-8"
                    self.send_response(HTTPStatus.NOT_FOUND)
                    self._headers(body, ctype)
                    if send_body:
                        self.wfile.write(body)
                    return
                self.send_response(HTTPStatus.OK)
                self._headers(body, ctype)
                if send_body:
                    self.wfile.write(body)

            def _headers(self, body: bytes, ctype: str):
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.end_headers()

            def log_message(self, fmt, *args):      # not on the console: at debug level
                log.debug("status page: %s %s", self.address_string(), fmt % args)

        server_class = ThreadingHTTPServer
        if ":" in host:                 # an IPv6 address
            server_class = type("ThreadingHTTPServer6", (ThreadingHTTPServer,),
                                {"address_family": socket.AF_INET6})
        try:
            self.httpd = server_class((host, port), Handler)
        except OSError as exc:
            raise StatusServerError(
                f"cannot serve the status page at {host}:{port}: {exc.strerror or exc}; "
                f"choose another [status] port (or --status-port)") from None
        self.httpd.daemon_threads = True
        shown = f"[{host}]" if ":" in host else host
        self.address = f"http://{shown}:{self.httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="status-page",
                                        kwargs={"poll_interval": 0.5}, daemon=True)

    def start(self) -> "StatusServer":
        self._thread.start()
        log.info("status page at %s (JSON at %sstatus.json)", self.address, self.address)
        return self

    def close(self) -> None:
        """Stop serving and free the port (waits for the serving loop's poll, <= 0.5 s)."""
        if self._thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()
