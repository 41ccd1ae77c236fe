#!/usr/bin/env python3
"""Start a netstorm cluster and run a command on every worker (``--help``); see README.md."""
import sys

from netstorm.launcher.cli import main

if __name__ == "__main__":
    sys.exit(main())
