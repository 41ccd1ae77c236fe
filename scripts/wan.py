#!/usr/bin/env python3
"""An emulated WAN on this machine (``python scripts/wan.py --help``); see docs/wan.md."""
import sys

from netstorm.wan.cli import main

if __name__ == "__main__":
    sys.exit(main())
