"""Where a worker finds its cluster (:class:`WorkerSettings`), read once from the environment
at the plug-in's edge, and the one error a worker's requests raise (:class:`KVStoreError`)."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..config.exit_reasons import write_reason
from ..core.security import worker_credentials
from ..config.keys import INSECURE_WARNING, SecurityError
from ..config.settings import DEFAULT_TIMEOUT_S

__all__ = ["KVStoreError", "WorkerSettings"]

log = logging.getLogger("netstorm.worker")


class KVStoreError(RuntimeError):
    """A request failed: rejected by the server, timed out, or the cluster was aborted."""


@dataclass(frozen=True)
class WorkerSettings:
    """Where a worker finds its cluster; read once from the environment at the plug-in's edge."""

    scheduler: str
    dc: str
    host: str = "127.0.0.1"
    local_index: int = -1
    timeout_s: float = DEFAULT_TIMEOUT_S    # registration only; then the cluster's
    key_file: str = ""          # the DC's secret key (CURVE); see security.py
    scheduler_key: str = ""     # the scheduler's public key (Z85)
    insecure: str = ""          # "1": the cluster runs without CURVE (curve = false)
    run_dir: str = ""           # where to put its ipc:// endpoint ("": the temp folder)
    reason_file: str = ""       # where to leave why it failed (the launcher's)
    joined_file: str = ""       # created once it joined the cluster (the launcher checks)
    advertise: str = ""         # where the other nodes reach it ("": ``host``)
    ports: str = ""             # "LOW-HIGH": the ports it may bind ("": any free one)

    ENV = {"scheduler": "NETSTORM_SCHEDULER", "dc": "NETSTORM_DC", "host": "NETSTORM_HOST",
           "local_index": "NETSTORM_LOCAL_INDEX", "timeout_s": "NETSTORM_TIMEOUT_S",
           "key_file": "NETSTORM_KEY_FILE", "scheduler_key": "NETSTORM_SCHEDULER_KEY",
           "insecure": "NETSTORM_INSECURE", "run_dir": "NETSTORM_RUN_DIR",
           "reason_file": "NETSTORM_REASON_FILE", "joined_file": "NETSTORM_JOINED_FILE",
           "advertise": "NETSTORM_ADVERTISE", "ports": "NETSTORM_WORKER_PORTS"}

    def port_range(self) -> tuple:
        """``ports`` as ``(low, high)``, inclusive; (): any free port."""
        if not self.ports:
            return ()
        low, _, high = self.ports.partition("-")
        try:
            low, high = int(low), int(high or low)
        except ValueError:
            low = high = 0
        if not 1 <= low <= high <= 65535:
            raise KVStoreError(f"NETSTORM_WORKER_PORTS={self.ports!r} is not a port range "
                               f"LOW-HIGH within 1..65535 (the launcher sets it from the "
                               f"cluster file's worker_ports)")
        return low, high

    def credentials(self):
        """CURVE credentials from the key variables; None with NETSTORM_INSECURE=1."""
        if self.insecure == "1":
            log.warning("worker of %s: %s", self.dc, INSECURE_WARNING)
            return None
        if not (self.key_file and self.scheduler_key):
            raise KVStoreError("NETSTORM_KEY_FILE and NETSTORM_SCHEDULER_KEY must name the "
                               "DC's secret key file and the scheduler's public key (the "
                               "launcher sets them), or NETSTORM_INSECURE=1 for a cluster "
                               "whose file sets [security] curve = false")
        try:
            return worker_credentials(self.dc, self.key_file, self.scheduler_key)
        except SecurityError as exc:
            raise KVStoreError(f"worker of {self.dc}: {exc}") from exc

    def cannot_join(self, exc: Exception) -> KVStoreError:
        """Why this worker could not join (no keys, registration refused or unanswered) as
        the :class:`KVStoreError` its script gets, also left in the reason file: the store
        that reports a script's failure does not exist yet, and the launcher's line would
        otherwise only say "exited with code 1"."""
        error = exc if isinstance(exc, KVStoreError) else KVStoreError(str(exc))
        write_reason(self.reason_file, f"KVStoreError: {error}",
                     caused_by_other=getattr(exc, "caused_by_other", False))
        return error

    @classmethod
    def from_env(cls, environ) -> "WorkerSettings":
        missing = [v for k, v in cls.ENV.items() if k in ("scheduler", "dc") and v not in environ]
        if missing:
            raise KVStoreError(f"{', '.join(missing)} not set: start workers with "
                               f"'python scripts/launch.py ... -- CMD' (see README), or set "
                               f"them to the scheduler address (tcp://host:port) and DC name")
        kwargs = {}
        try:
            for field_name, var in cls.ENV.items():
                if var in environ:
                    kind = cls.__dataclass_fields__[field_name].type
                    kwargs[field_name] = {"int": int, "float": float}.get(kind, str)(
                        environ[var])
        except ValueError as exc:
            raise KVStoreError(f"bad netstorm environment variable: {exc}") from exc
        return cls(**kwargs)
