"""``netstorm-status``: print a running cluster's status as tables in the terminal.

    netstorm-status --cluster cluster.toml              # once
    netstorm-status --cluster cluster.toml --watch      # every 2 s until Ctrl-C
    netstorm-status --address 127.0.0.1:8080 --watch 5

The scheduler serves its status at the cluster file's ``[status]`` host and port
(``netstorm-launch --status-port``); this asks ``/status.json`` there and prints it
(:mod:`.status_table`). A cluster file without ``[status] port``, or an address that does not
answer, is one line naming the file or the address; exit status 1 when the status could not
be read, 2 for bad input (docs/operations.md, *netstorm-status*).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

import netstorm

from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster
from netstorm.geoserver.config.limits import text_flag
from netstorm.geoserver.config.uncaught import debug_wanted, report_uncaught

from .status_table import check_snapshot, render

__all__ = ["DEFAULT_WATCH_S", "PROG", "StatusUnavailable", "fetch", "main", "status_url"]

PROG = "netstorm-status"
DEFAULT_WATCH_S = 2.0
TIMEOUT_S = 5.0             # one request's limit: a scheduler that hangs is said so
MAX_ANSWER_BYTES = 8 << 20  # a status of thousands of links is ~1 MB


class StatusUnavailable(Exception):
    """The status could not be read; the text names the address and why."""


def status_url(args) -> str:
    """The ``/status.json`` URL from ``--address`` or the cluster file's ``[status]``."""
    if args.address:
        host, sep, port = args.address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ClusterFileError(f"--address {args.address!r}: give HOST:PORT, e.g. "
                                   f"127.0.0.1:8080")
        return f"http://{host}:{int(port)}/status.json"
    config = load_cluster(args.cluster)
    if not config.status.on:
        raise ClusterFileError(f"{args.cluster}: no [status] port: the scheduler serves no "
                               f"status page (add [status] port = 8080 to the file, or start "
                               f"the cluster with netstorm-launch --status-port 8080)")
    host = config.status.reached_at(config.scheduler_reached_at)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{config.status.port}/status.json"


def fetch(url: str, timeout_s: float = TIMEOUT_S) -> dict:
    """The snapshot at ``url``, checked; :class:`StatusUnavailable` naming ``url`` and why
    when it cannot be had (refused, timed out, not netstorm's status JSON)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:   # noqa: S310 - http only
            body = answer.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise StatusUnavailable(f"{url} answered HTTP {exc.code} {exc.reason}: not a "
                                f"netstorm scheduler's status page?") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        reason = getattr(reason, "strerror", None) or str(reason)
        raise StatusUnavailable(f"cannot reach the scheduler's status at {url}: {reason} (is "
                                f"the cluster running, and is its [status] host reachable "
                                f"from here?)") from None
    if len(body) > MAX_ANSWER_BYTES:
        raise StatusUnavailable(f"{url}: the answer is larger than {MAX_ANSWER_BYTES} bytes")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise StatusUnavailable(f"{url} did not answer with JSON: not a netstorm "
                                f"scheduler's status page?") from None
    problem = check_snapshot(data)
    if problem:
        raise StatusUnavailable(f"{url}: {problem}")
    return data


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog=PROG, description="Print a running netstorm cluster's status (its scheduler's "
                               "/status.json) as tables in the terminal.")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--cluster", type=text_flag, metavar="FILE",
                       help="the cluster file: the status is at its [status] host and port")
    where.add_argument("--address", type=text_flag, metavar="HOST:PORT",
                       help="the status page's address (e.g. netstorm-launch --dcs N "
                            "--status-port PORT: 127.0.0.1:PORT)")
    parser.add_argument("--watch", nargs="?", type=float, const=DEFAULT_WATCH_S,
                        default=None, metavar="SECONDS",
                        help=f"refresh every SECONDS (default {DEFAULT_WATCH_S:g}) until "
                             f"Ctrl-C")
    parser.add_argument("--count", type=int, default=0, metavar="N",
                        help="with --watch: stop after N refreshes (0: never)")
    parser.add_argument("--json", action="store_true", help="print the JSON as it came")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an unexpected error")
    parser.add_argument("--version", action="version", version=f"{PROG} {netstorm.__version__}")
    args = parser.parse_args(argv)
    if args.watch is not None and not 0.1 <= args.watch <= 3600:
        parser.error(f"--watch must be a number of seconds in [0.1, 3600], got {args.watch:g}")
    if args.count < 0:
        parser.error(f"--count must be 0 or more, got {args.count}")
    return args


def _show(url: str, as_json: bool, out) -> None:
    snap = fetch(url)
    out.write(json.dumps(snap, indent=1) + "\n" if as_json else render(snap, url))


def _watch(url: str, args, out) -> int:
    """Print every ``args.watch`` seconds, the screen cleared on a terminal; a status that
    cannot be read is said and asked again (the cluster may be starting or gone)."""
    shown = 0
    clear = "\033[H\033[J" if out.isatty() else ""
    while True:
        out.write(clear)
        try:
            _show(url, args.json, out)
        except StatusUnavailable as exc:
            out.write(f"{PROG}: {exc}; asking again in {args.watch:g} s\n")
        out.write(f"-- every {args.watch:g} s, Ctrl-C ends --\n" if not clear else "")
        out.flush()
        shown += 1
        if args.count and shown >= args.count:
            return 0
        time.sleep(args.watch)


def main(argv=None) -> int:
    """Exit status 0, 1 when the status could not be read, 2 for bad input, 130 on
    Ctrl-C outside --watch (which ends with 0)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse_args(argv)
        url = status_url(args)
        if args.watch is not None:
            try:
                return _watch(url, args, sys.stdout)
            except KeyboardInterrupt:
                return 0
        _show(url, args.json, sys.stdout)
        return 0
    except ClusterFileError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except StatusUnavailable as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:     # noqa: BLE001 - the last resort: one line, never a traceback
        return report_uncaught(PROG, exc, debug_wanted(argv, os.environ))


if __name__ == "__main__":
    sys.exit(main())
