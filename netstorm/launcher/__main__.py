"""``python -m netstorm.launcher ...``: the same as ``scripts/launch.py``."""
import sys

from .cli import main

sys.exit(main())
