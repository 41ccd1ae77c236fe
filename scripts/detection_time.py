#!/usr/bin/env python3
"""How fast a dead or silent node is noticed (docs/recovery-detection.md).

    python scripts/detection_time.py                      # every case, once, on loopback
    python scripts/detection_time.py --cases server:KILL,server:STOP --repeat 3
    python scripts/detection_time.py --model --rtt-ms 0,40,200   # the deadline on long links

Live (the default): per case a fresh cluster of 2 DCs x 1 worker on loopback (scheduler,
servers and workers started one by one, no launcher: nothing restarts or stops the others
for it), training a small key in a loop; once every worker is ready and the nodes were heard
regularly (``--warm`` seconds), the victim gets SIGKILL (its process ends: its connections
close) or SIGSTOP (it goes silent, its connections stay up). Measured: for a server or a
worker, the time from the signal to the scheduler's verdict; for the scheduler, to the first
verdict of a server or worker (each judge logs ``verdict at T: ...``, or ``suspected at T:
...`` for a silence it holds to ``dead_after_s`` because nothing would restart the node; T
on the monotonic clock all processes of a machine share). Prints one line per run and the
median per case.

``--model``: no processes; the adaptive deadline
(:class:`~netstorm.geoserver.core.failure_detector.FailureDetector`) fed beats every
``--heartbeat`` s with ``--jitter`` s of uniform jitter and each ``--rtt-ms`` round trip, as
the scheduler sees them on a link of that length: the deadline, and the silence after the
last beat before a SIGSTOP is noticed (checked every 10 ms), and after a SIGKILL (the
closed connection's news takes one one-way delay, then its grace). The emulated WAN's user-space
delay needs one source address per DC (namespaces: docs/wan.md); on loopback every
connection comes from 127.0.0.1, so a long link is modelled here rather than run.
"""
import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VERDICT = re.compile(r"(?:verdict|suspected) at ([0-9.]+): (.*)")  # noticed: either
CASES = ("server:KILL", "server:STOP", "worker:KILL", "worker:STOP", "scheduler:KILL",
         "scheduler:STOP")


def worker() -> None:
    """One worker: a small key pushed and pulled until it is stopped."""
    import mxnet as mx      # noqa: PLC0415 - the driver never imports MXNet
    kv = mx.kv.create("netstorm")
    kv.init(0, mx.nd.zeros((256,)))
    print(f"rank {kv.rank} ready", flush=True)
    grad, out = mx.nd.ones((256,)), mx.nd.zeros((256,))
    while True:
        kv.pushpull(0, grad, out=out)
        out.wait_to_read()


class Cluster:
    """Scheduler, servers and workers of a pseudo cluster, started one by one."""

    def __init__(self, folder: Path, transport: dict):
        from netstorm.geoserver.config.cluster import pseudo_cluster
        from netstorm.geoserver.config.cluster_toml import to_toml
        from netstorm.launcher.supervisor import free_port, with_keys
        self.config = with_keys(pseudo_cluster(2, 1, free_port(), **transport), folder,
                                whole_cluster=True)
        self.file = folder / "cluster.toml"
        self.file.write_text(to_toml(self.config))
        self.folder = folder
        self.procs: dict = {}
        self.logs: dict = {}

    def start(self) -> None:
        from netstorm.launcher.supervisor import worker_env
        py, env = sys.executable, dict(os.environ, TMPDIR=str(self.folder))
        self._spawn("scheduler", [py, "-m", "netstorm.scheduler", "--cluster", str(self.file)],
                    env)
        for dc in self.config.dcs:
            self._spawn(f"server {dc.name}", [py, "-m", "netstorm.geoserver", "--cluster",
                                              str(self.file), "--dc", dc.name, "--run-dir",
                                              str(self.folder)], env)
            for i in range(dc.workers):
                self._spawn(f"worker {dc.name}/{i}", [py, str(Path(__file__).resolve()),
                                                     "--worker"],
                            dict(env, **worker_env(self.config, dc, i),
                                 NETSTORM_RUN_DIR=str(self.folder)))

    def _spawn(self, name: str, argv: list, env: dict) -> None:
        self.logs[name] = open(self.folder / f"{name.replace('/', '_')}.log", "w+b")
        self.procs[name] = subprocess.Popen(argv, env=env, cwd=REPO, stdout=self.logs[name],
                                            stderr=subprocess.STDOUT)

    def output(self, name: str) -> str:
        return (self.folder / f"{name.replace('/', '_')}.log").read_text(errors="replace")

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for name in [n for n in self.procs if n.startswith("worker")]:
            while "ready" not in self.output(name):
                if self.procs[name].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} not ready: {self.output(name)[-2000:]}")
                time.sleep(0.2)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait()
        for log in self.logs.values():
            log.close()


def run_case(case: str, args) -> tuple:
    """One run of ``case`` (``victim:SIGNAL``): ``(seconds to the verdict, its text)``."""
    victim, sig = case.split(":")
    folder = Path(tempfile.mkdtemp(prefix="netstorm-detect-", dir="/tmp"))
    cluster = Cluster(folder, dict(heartbeat_s=args.heartbeat, dead_after_s=args.dead_after,
                                   detect_floor_s=args.floor, timeout_s=120.0))
    try:
        cluster.start()
        cluster.wait_ready(args.ready_timeout)
        time.sleep(args.warm)
        name = {"server": "server dc1", "worker": "worker dc1/0",
                "scheduler": "scheduler"}[victim]
        cluster.procs[name].send_signal(getattr(signal, f"SIG{sig}"))
        signalled = time.monotonic()
        judges = ["server dc0", "worker dc0/0"] if victim == "scheduler" else ["scheduler"]
        deadline = signalled + args.dead_after + 30
        while time.monotonic() < deadline:
            found = [m for m in (VERDICT.search(cluster.output(n)) for n in judges) if m]
            if found:
                first = min(found, key=lambda m: float(m.group(1)))
                return float(first.group(1)) - signalled, first.group(2)[:160]
            time.sleep(0.02)
        return float("nan"), "no verdict"
    finally:
        cluster.close()
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def model(args) -> None:
    """The deadline on links of each ``--rtt-ms`` (see the module's docstring)."""
    from netstorm.geoserver.core.connection_watch import closed_grace
    from netstorm.geoserver.core.failure_detector import FailureDetector
    rng = random.Random(1)
    print(f"heartbeat {args.heartbeat}s, jitter up to {args.jitter}s, floor {args.floor}s, "
          f"dead_after_s {args.dead_after}s")
    for rtt_ms in args.rtt_ms:
        detector = FailureDetector(args.dead_after, args.heartbeat, args.floor)
        t = 0.0
        for _ in range(200):            # 100 s of beats, each delayed by half the round trip
            t += args.heartbeat
            detector.heard("node", t + rtt_ms / 2e3 + rng.uniform(0, args.jitter))
            detector.note_rtt("node", rtt_ms / 1e3)
        deadline = detector.deadline("node")
        # stopped right after its last beat: noticed once its silence passes the deadline,
        # at the scheduler's next look (every 10 ms here)
        noticed = 0.01 * (int(deadline / 0.01) + 1)
        # killed: its connection's end arrives a one-way delay later, then the grace
        killed = rtt_ms / 2e3 + closed_grace(rtt_ms / 1e3)
        print(f"rtt {rtt_ms:6.0f} ms: deadline {deadline:5.2f} s; a SIGSTOP right after "
              f"a beat noticed {noticed:5.2f} s later ({noticed / args.heartbeat:.1f} "
              f"heartbeats); a SIGKILL {killed:5.2f} s later")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"victim:SIGNAL, comma-separated (default: {','.join(CASES)})")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--heartbeat", type=float, default=0.5, help="heartbeat_s")
    parser.add_argument("--dead-after", type=float, default=10.0, help="dead_after_s")
    parser.add_argument("--floor", type=float, default=1.0, help="detect_floor_s (0: off)")
    parser.add_argument("--warm", type=float, default=6.0,
                        help="seconds of training before the signal")
    parser.add_argument("--ready-timeout", type=float, default=180.0)
    parser.add_argument("--model", action="store_true", help="the deadline, no processes")
    parser.add_argument("--rtt-ms", type=lambda s: [float(x) for x in s.split(",")],
                        default=[0.0, 40.0, 200.0, 400.0])
    parser.add_argument("--jitter", type=float, default=0.05,
                        help="--model: each beat's jitter, uniform in [0, JITTER] s")
    args = parser.parse_args()
    if args.worker:
        worker()
        return 0
    if args.model:
        model(args)
        return 0
    results: dict = {}
    for case in args.cases.split(","):
        for _ in range(args.repeat):
            seconds, text = run_case(case, args)
            results.setdefault(case, []).append(seconds)
            print(f"{case:16s} {seconds:6.2f} s  {text}", flush=True)
    for case, times in results.items():
        print(f"{case:16s} median {statistics.median(times):.2f} s over {len(times)} run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
