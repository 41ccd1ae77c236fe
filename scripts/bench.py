#!/usr/bin/env python3
"""Stock MXNet and netstorm side by side on an emulated WAN (``--help``); see docs/benchmarks.md."""
import sys

from netstorm.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
