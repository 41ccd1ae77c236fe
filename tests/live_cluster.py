"""A live 2-DC x 1-worker cluster for tests that attack it while it trains (test_fuzz.py,
test_foreign_peers.py, test_recovery.py). Its workers run tests/workers/fuzz_worker.py: an exact-sum loop
that says where every node listens and which key its DC has, and stops when told."""
import contextlib
import json
import threading
import time
from pathlib import Path

import psutil
import pytest

from launching import launch, leftovers, worker_cmd
from netstorm.geoserver.config.keys import read_key_pair

CLUSTER_TIMEOUT_S = 15      # any node's wait for a peer: a hang ends within this
LAUNCH_TIMEOUT_S = 100


class Cluster:
    """2 DCs x 1 worker through the launcher, in a thread; tests/workers/fuzz_worker.py
    reports where everything listens and how far it trained (files in ``tmp``)."""

    def __init__(self, tmp: Path, dataplane: str = "auto"):
        self.tmp = tmp
        self.dataplane = dataplane
        tmp.mkdir(exist_ok=True)
        self.result = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.workers = self._ready(timeout=45)
        self.procs = self._processes()
        nodes = {n["id"]: (n["role"], n["dc"]) for n in self.workers[0]["nodes"]}
        assert nodes == {0: ("scheduler", ""), 1: ("server", "dc0"), 2: ("server", "dc1"),
                         3: ("worker", "dc0"), 4: ("worker", "dc1")}, nodes  # fuzz_messages' ids
        rank0 = self.workers[0]
        self.targets = {"server dc0": rank0["server"], "scheduler": rank0["scheduler"],
                        "worker dc0/0": rank0["address"]}
        # the fuzzer holds dc0's key (an insider: a stranger is refused at the handshake)
        self.pair = read_key_pair(rank0["key_file"])
        self.server_keys = {"server dc0": self.pair.public, "worker dc0/0": self.pair.public,
                            "scheduler": rank0["scheduler_key"].encode()}

    def _run(self):
        try:
            self.result = launch(["--dcs", 2, "--workers-per-dc", 1, "--timeout",
                                  CLUSTER_TIMEOUT_S, "--dataplane", self.dataplane],
                                 worker_cmd("fuzz_worker.py", self.tmp),
                                 self.tmp, timeout=LAUNCH_TIMEOUT_S)
        except BaseException as exc:         # pytest.fail on a hang: re-raised by join()
            self.result = exc

    def _ready(self, timeout: float) -> list:
        deadline = time.monotonic() + timeout
        files = [self.tmp / f"worker-{rank}.json" for rank in (0, 1)]
        while not all(f.exists() for f in files):
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"the cluster never started training:\n"
                            f"{self.join().output[-4000:]}")
            time.sleep(0.1)
        return [json.loads(f.read_text()) for f in files]

    def _processes(self) -> dict:
        found = {}
        for p in leftovers(str(self.tmp)):
            line = " ".join(p.info["cmdline"] or ())
            if "netstorm.scheduler" in line:
                found["scheduler"] = p
            elif "netstorm.geoserver" in line:
                found[f"server {line.split('--dc ')[1].split()[0]}"] = p
        for w in self.workers:
            found[f"worker dc{w['rank']}/0"] = psutil.Process(w["pid"])
        assert len(found) == 5, found
        return found

    def dead(self) -> list:
        return [name for name, p in self.procs.items() if not alive(p)]

    def rounds(self) -> int:
        return min(int((self.tmp / f"progress-{rank}").read_text()) for rank in (0, 1))

    def stop_after(self, more: int) -> None:
        stop = max(int((self.tmp / f"progress-{r}").read_text()) for r in (0, 1)) + more
        (self.tmp / ".stop").write_text(str(stop))
        (self.tmp / ".stop").rename(self.tmp / "stop")

    def join(self):
        """The launcher's Run, its output also in ``tmp``/cluster.log."""
        self.thread.join(LAUNCH_TIMEOUT_S + 10)
        if isinstance(self.result, BaseException):
            raise self.result
        (self.tmp / "cluster.log").write_text(self.result.output)
        return self.result

    def kill(self):
        for p in leftovers(str(self.tmp)):
            p.kill()

    @contextlib.contextmanager
    def attacked(self, ctx):
        """Around what a test does to the running cluster from ``ctx``'s sockets: a failure
        kills the cluster; at the end ``ctx`` is terminated and the run joined
        (:meth:`exact_run` checks it)."""
        try:
            yield self
        except BaseException:
            self.kill()
            raise
        finally:
            ctx.term()
            self.result = self.join()

    def exact_run(self):
        """The joined run, which must have ended well with both workers' sums exact."""
        run = self.result
        assert run.code == 0, run.output[-4000:]
        assert len([l for l in run.lines("worker") if "every sum exact" in l]) == 2, \
            run.output[-4000:]
        return run


def alive(proc) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
