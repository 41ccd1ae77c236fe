"""Starting a cluster: :mod:`.supervisor` (the library) and :mod:`.cli` (``scripts/launch.py``,
``python -m netstorm.launcher``)."""
from .supervisor import Launcher, free_port, interrupts_raise, run_cluster, run_pslite_cluster

__all__ = ["Launcher", "free_port", "interrupts_raise", "run_cluster", "run_pslite_cluster"]
