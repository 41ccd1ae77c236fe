#!/usr/bin/env python3
"""One DC server's aggregation throughput beside a ps-lite server's, on loopback; with
``--wan-dcs N``, each of N DC servers' CPU-s per WAN GB (``--help``); see docs/benchmarks.md."""
import sys

from netstorm.bench.throughput import main

if __name__ == "__main__":
    sys.exit(main())
