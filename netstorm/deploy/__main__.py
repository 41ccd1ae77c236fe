"""``python -m netstorm.deploy``: the same as ``netstorm-deploy``."""
import sys

from .cli import main

sys.exit(main())
