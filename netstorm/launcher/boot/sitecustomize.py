"""Run by Python at the start of every worker the launcher starts (the launcher puts this
folder first on the workers' ``PYTHONPATH``; Python imports ``sitecustomize`` at start-up).

It imports ``netstorm``, so a script that names the ``'netstorm'`` kvstore needs no
``import netstorm`` (registration waits for MXNet's own import, so scripts that never import
MXNet pay nothing). With ``NETSTORM_AS_DIST_SYNC=1`` (``launch.py --as-dist-sync``) MXNet's
``dist_sync`` names create netstorm's store too. Then it runs the ``sitecustomize`` this one
hides, if the environment has one. A worker whose Python cannot import netstorm gets a
warning naming the cause and runs on (the launcher then reports that it never joined).
"""
import importlib.machinery
import importlib.util
import os
import sys


def _boot() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import netstorm  # noqa: PLC0415  (registers 'netstorm' once MXNet is imported)
    except ImportError as exc:
        print(f"netstorm launcher: this worker's Python ({sys.executable}) cannot import "
              f"netstorm ({exc}); start the launcher and the workers with the virtualenv's "
              f"Python (scripts/venv.sh)", file=sys.stderr, flush=True)
    else:
        if os.environ.get("NETSTORM_AS_DIST_SYNC") == "1":
            netstorm.as_dist_sync()
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:      # the one this file hides
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_boot()
