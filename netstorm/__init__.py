"""netstorm: a hierarchical, WAN-aware parameter server for MXNet 1.9.

``import netstorm`` registers the ``'netstorm'`` kvstore with MXNet, so that
``mx.kv.create('netstorm')``, ``gluon.Trainer(..., kvstore='netstorm')`` and
``Module.fit(kvstore='netstorm')`` use it.

The installed package maps the repository's folders into one namespace:

* ``netstorm.geoserver`` (``geoserver/``): the DC server, the wire format and transport;
* ``netstorm.scheduler`` (``scheduler/``): the central scheduler and WAN planning;
* ``netstorm.kvstore`` (``kvstore/``): the MXNet plug-in;
* ``netstorm.launcher``, ``netstorm.wan``, ``netstorm.bench`` (in ``netstorm/``): the tools
  that start a cluster, emulate a WAN and benchmark it.

Servers and the scheduler never import MXNet unless an optimizer runs on them: importing
MXNet costs seconds and hundreds of MB per process. So when MXNet is not imported yet, the
registration waits for it: it runs right after ``import mxnet`` completes, whichever of the
two imports comes first (a ``sys.meta_path`` finder that removes itself on first use).

Only ``import netstorm`` itself does that, as a worker's script (or the launcher's boot in a
worker) does. Python imports this package first whenever any of its sub-packages is
imported (``python -m netstorm.geoserver``, ``import netstorm.scheduler...``): those imports
install no finder and register nothing (:func:`_imported_for_a_submodule`).

``netstorm.__version__`` is the installed distribution's version (setup.cfg's in a checkout
that was never installed), looked up on first use, not at import.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

__all__ = ["NetStorm", "__version__", "as_dist_sync", "refuse_stock_dist"]

UNKNOWN_VERSION = "0+unknown"


def _register() -> None:
    from . import kvstore  # noqa: F401,PLC0415  (registers 'netstorm' with MXNet)


def _alias_dist_sync() -> None:
    from .kvstore import alias_dist_sync  # noqa: PLC0415
    alias_dist_sync()


def as_dist_sync() -> None:
    """Make MXNet's synchronous distributed kvstore names (``dist_sync``,
    ``dist_device_sync``, ``dist``) create netstorm's store, so that a script written for
    stock MXNet runs on netstorm unedited (``launch.py --as-dist-sync`` calls this in every
    worker); ``dist_async`` becomes a clear error instead of a silent change of semantics.
    Takes effect now if MXNet is imported, else right after its import."""
    _after_mxnet(_alias_dist_sync)


def _refuse_stock_dist() -> None:
    from .kvstore import refuse_stock_dist as refuse  # noqa: PLC0415
    refuse()


def refuse_stock_dist() -> None:
    """Make MXNet's ``dist_*`` kvstore names a clear error naming ``--as-dist-sync``
    instead of ps-lite's abort (the launcher's boot calls this in a worker started without
    the flag). Takes effect now if MXNet is imported, else right after its import."""
    _after_mxnet(_refuse_stock_dist)


class _AfterMxnetImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of ``mxnet`` so that its ``callbacks`` run
    once ``mxnet`` has been executed. Removes itself on first use."""

    def __init__(self):
        self.callbacks = []

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "mxnet":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("mxnet")
        if spec is None or spec.loader is None:
            return spec
        loader, callbacks = spec.loader, self.callbacks

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                for callback in callbacks:
                    callback()

        spec.loader = _Loader()
        return spec


def __getattr__(name: str):
    if name == "NetStorm":
        from .kvstore import NetStorm  # noqa: PLC0415
        return NetStorm
    if name == "__version__":
        version = _installed_version()
        globals()["__version__"] = version      # looked up once
        return version
    raise AttributeError(f"module 'netstorm' has no attribute {name!r}")


def _installed_version(setup_cfg=None) -> str:
    """netstorm's version, the one place it is read: the installed distribution's metadata
    (``importlib.metadata``), else, in a checkout that was never installed, the ``version``
    of its ``setup.cfg`` (``setup_cfg``, default the one beside this package's folder),
    else :data:`UNKNOWN_VERSION`."""
    from importlib import metadata  # noqa: PLC0415  (only when asked: it costs an import)
    from pathlib import Path        # noqa: PLC0415
    try:
        return metadata.version("netstorm")
    except metadata.PackageNotFoundError:
        return _checkout_version(setup_cfg or Path(__file__).resolve().parent.parent /
                                "setup.cfg")


def _checkout_version(setup_cfg) -> str:
    """The ``[metadata] version`` of the file ``setup_cfg`` if it is netstorm's, else
    :data:`UNKNOWN_VERSION`."""
    import configparser  # noqa: PLC0415
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(setup_cfg, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return UNKNOWN_VERSION
    if parser.get("metadata", "name", fallback="") != "netstorm":
        return UNKNOWN_VERSION
    return parser.get("metadata", "version", fallback="").strip() or UNKNOWN_VERSION


def _after_mxnet(callback) -> None:
    """Run ``callback`` now if MXNet is imported, else right after its import."""
    if "mxnet" in sys.modules:
        callback()
        return
    finder = next((f for f in sys.meta_path if isinstance(f, _AfterMxnetImport)), None)
    if finder is None:
        finder = _AfterMxnetImport()
        sys.meta_path.insert(0, finder)
    finder.callbacks.append(callback)


def _imported_for_a_submodule() -> bool:
    """Whether Python is importing this package only as the parent of one of its
    sub-packages (``import netstorm.geoserver.server``): the import machinery's frame for
    that name is on the stack. Stdlib ``importlib`` frames only; if it cannot tell (another
    interpreter), the answer is False and the package registers as for ``import netstorm``."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_find_and_load_unlocked" and \
                frame.f_code.co_filename.startswith("<frozen importlib"):
            name = frame.f_locals.get("name", "")
            if isinstance(name, str) and name.startswith(__name__ + "."):
                return True
        frame = frame.f_back
    return False


if not _imported_for_a_submodule():
    _after_mxnet(_register)
