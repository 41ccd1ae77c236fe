#!/usr/bin/env python3
"""Make CURVE keys for a cluster file (``--help``); see docs/security.md."""
import sys

from netstorm.launcher.keygen import main

if __name__ == "__main__":
    sys.exit(main())
