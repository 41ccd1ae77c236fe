"""Helpers shared by the process entry points (``python -m netstorm.scheduler``,
``python -m netstorm.geoserver``)."""
from __future__ import annotations

import logging
import signal
import sys


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")


class Terminated(Exception):
    """SIGTERM or SIGINT arrived."""


def raise_on_signals() -> None:
    """Turn SIGTERM/SIGINT into :class:`Terminated` so loops unwind and close their sockets."""
    def handler(signum, _frame):
        raise Terminated(signal.Signals(signum).name)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
