"""Run by Python at the start of every worker the launcher starts (the launcher puts this
folder first on the workers' ``PYTHONPATH``; Python imports ``sitecustomize`` at start-up).

It imports ``netstorm``, so a script that names the ``'netstorm'`` kvstore needs no
``import netstorm`` (registration waits for MXNet's own import, so scripts that never import
MXNet pay nothing). With ``NETSTORM_AS_DIST_SYNC=1`` (``launch.py --as-dist-sync``) MXNet's
``dist_sync`` names create netstorm's store too; without it, under the launcher, they are
refused with what to do, before ps-lite (which finds no ``DMLC_*`` variables) aborts the
process. Then it runs the ``sitecustomize`` this one hides, if the environment has one.

So that the launcher's line says why a worker failed, also before it created the store:

* a script that dies of an uncaught exception leaves ``Type: message`` in its reason file
  (``NETSTORM_REASON_FILE``), unless netstorm left its own reason there;
* a worker whose Python cannot import netstorm (the launcher run from an inactive
  virtualenv: CMD's ``python`` is another interpreter) stops at once, naming both
  interpreters and the fix, if it is the process the launcher started
  (``NETSTORM_LAUNCHER_PID`` is its parent); a process CMD starts in turn (a shell script's
  helper) gets a warning and runs on, its cause left as the reason should the worker end
  without joining.

With ``NETSTORM_LOG_LEVEL`` (``launch.py --log-level``, ``--quiet``), netstorm's loggers
write to standard error from that level up, as the servers' lines do.

Standard library only, and no ``netstorm`` needed for the above: the reason file's format
is :func:`netstorm.geoserver.config.exit_reasons.write_reason`'s.
"""
import importlib.machinery
import importlib.util
import json
import os
import sys

EXIT_FAILED = 1         # exit_reasons.EXIT_FAILED
MAX_REASON_CHARS = 2000  # exit_reasons.MAX_REASON_CHARS
BY, BOOT = "by", "boot"  # marks the reasons this boot left (read_reason ignores the key)

LOG_LEVELS = ("debug", "info", "warning", "error")   # netstorm.geoserver.cli.LOG_LEVELS
LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"  # cli.LOG_FORMAT
LOG_DATE_FORMAT = "%H:%M:%S"                         # cli.LOG_DATE_FORMAT
LEVEL_VARIABLE = "NETSTORM_LOG_LEVEL"                # launcher.logs.LEVEL_VARIABLE


def leave_reason(path: str, reason: str) -> None:
    """Write ``reason`` to the reason file ``path`` as the launcher reads it, unless
    netstorm left its own there (it says more: the store's failure, or that another node's
    failure caused this one); one this boot left, by this or another Python process of the
    worker (a script CMD starts in turn), gives way to the later one."""
    if not path:
        return
    try:
        with open(path, encoding="utf-8") as f:
            if json.load(f).get(BY) != BOOT:
                return
    except (OSError, ValueError, AttributeError):
        pass                            # none yet (or unreadable): write it
    try:
        with open(f"{path}.{os.getpid()}", "w", encoding="utf-8") as f:
            json.dump({"reason": reason[:MAX_REASON_CHARS], "caused_by_other": False,
                       BY: BOOT}, f)
        os.replace(f"{path}.{os.getpid()}", path)
    except OSError:
        pass


def describe(etype, value) -> str:
    """``Type: message``, as the launcher's line shows an error (exit_reasons.describe)."""
    text = str(value).strip()
    return f"{etype.__name__}: {text}" if text else etype.__name__


def install_reason_hook(path: str) -> None:
    """An uncaught exception leaves ``Type: message`` in the reason file ``path``, then
    the previous hook prints it as before. A stop (KeyboardInterrupt, netstorm's
    ``Terminated``) is no cause: the launcher names the process that was."""
    previous = sys.excepthook

    def hook(etype, value, tb):
        if not issubclass(etype, KeyboardInterrupt):
            leave_reason(path, describe(etype, value))
        previous(etype, value, tb)
    sys.excepthook = hook


def log_netstorm_at(level: str, logger_name: str = "netstorm") -> bool:
    """netstorm's loggers (``logger_name`` and below) write to standard error at ``level``
    (``NETSTORM_LOG_LEVEL``, the launcher's ``--log-level``), formatted as the servers'
    lines; they do not propagate, so a script's own logging set-up neither repeats nor
    drops them. False, with a warning, for a level that is not one of :data:`LOG_LEVELS`."""
    import logging  # noqa: PLC0415  (only a worker that was given a level pays for it)
    if level not in LOG_LEVELS:
        print(f"netstorm launcher: warning: NETSTORM_LOG_LEVEL={level!r} is not one of "
              f"{', '.join(LOG_LEVELS)}; netstorm's log level left as it was",
              file=sys.stderr, flush=True)
        return False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT))
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    return True


def wrong_python(exc: ImportError, environ) -> str:
    """Why this worker cannot run: its interpreter is not the launcher's, and the fix."""
    launcher = environ.get("NETSTORM_LAUNCHER_PYTHON", "")
    text = f"this worker's Python ({sys.executable}) cannot import netstorm ({exc})"
    if not launcher:
        return text + ("; start the launcher and the workers with the virtualenv's Python "
                       "(scripts/venv.sh)")
    activate = os.path.join(os.path.dirname(launcher), "activate")
    fix = f"source {activate}" if os.path.isfile(activate) else "put it first on PATH"
    return (f"{text}, but the launcher runs on {launcher}: start CMD with that Python "
            f"({launcher} ...), or {fix} before starting the launcher")


def started_by_the_launcher(environ) -> bool:
    """Whether this process is the one the launcher started (not one CMD started)."""
    pid = environ.get("NETSTORM_LAUNCHER_PID", "")
    return pid.isdigit() and int(pid) == os.getppid()


def under_the_launcher_without_dist_sync(environ) -> bool:
    """A worker of netstorm's launcher without ``--as-dist-sync``, not a ps-lite node."""
    return "NETSTORM_SCHEDULER" in environ and "DMLC_ROLE" not in environ and \
        environ.get("NETSTORM_AS_DIST_SYNC") != "1"


def _boot(environ) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if environ.get(LEVEL_VARIABLE):
        log_netstorm_at(environ[LEVEL_VARIABLE])
    reason_file = environ.get("NETSTORM_REASON_FILE", "")
    if reason_file:
        install_reason_hook(reason_file)
    try:
        import netstorm  # noqa: PLC0415  (registers 'netstorm' once MXNet is imported)
    except ImportError as exc:
        why = wrong_python(exc, environ)
        leave_reason(reason_file, why)  # also if CMD started it: should the worker not join
        if started_by_the_launcher(environ):
            print(f"netstorm launcher: {why}", file=sys.stderr, flush=True)
            os._exit(EXIT_FAILED)       # at start-up: nothing to clean up yet
        print(f"netstorm launcher: warning: {why}", file=sys.stderr, flush=True)
    else:
        if environ.get("NETSTORM_AS_DIST_SYNC") == "1":
            netstorm.as_dist_sync()
        elif under_the_launcher_without_dist_sync(environ):
            netstorm.refuse_stock_dist()    # after its registration
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:      # the one this file hides
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":     # imported by Python at start-up (tests import it by path)
    _boot(os.environ)
