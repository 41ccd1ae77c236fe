#!/usr/bin/env python3
"""How long a lost DC server costs: a run on the emulated WAN whose server is SIGKILLed
mid-training, timed per round: replaced from a peer DC's replica (``--replace``:
``--server-restarts 1``), or the whole cluster restarted from its latest checkpoint
(docs/recovery.md).

    sudo python scripts/recovery_time.py --wan paper9 --bandwidth-scale 0.5 --kill dc3 \
        --adapt --replace

starts ``launch.py --wan ... --policy fapt --checkpoint C --cluster-restarts 1`` with this
script as every worker (``--worker``: one dense float32 key of ``--mb`` MB, SGD with
momentum, a checkpoint every ``--save-every`` rounds, rank 0 prints each round's end
time), kills the server of ``--kill`` two rounds after the checkpoint of round
``--kill-after``, and reports: the median round time before the fault, the time from the
kill until the run is back at the round it had reached (the lost work and the restart),
and the rounds until a round is again within 10% of that median. One run: a measurement,
not a benchmark of several.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROUND = re.compile(r"\[worker [^\]]+\] round (\d+) t=([0-9.]+)")


def worker(args) -> None:
    import mxnet as mx      # noqa: PLC0415 - the driver never imports MXNet
    import numpy as np      # noqa: PLC0415

    kv = mx.kv.create("netstorm")
    size = int(args.mb * (1 << 20) / 4)
    kv.init(0, mx.nd.zeros((size,)))
    kv.set_optimizer(mx.optimizer.create("sgd", learning_rate=0.01, momentum=0.9))
    grad, out = mx.nd.array(np.full(size, kv.rank + 1, np.float32)), mx.nd.zeros((size,))
    for rnd in range(kv.resumed_round + 1, args.rounds + 1):
        kv.pushpull(0, grad, out=out)
        out.wait_to_read()
        if kv.rank == 0:
            print(f"round {rnd} t={time.time():.3f}", flush=True)
            if args.save_every and rnd % args.save_every == 0:
                kv.save_checkpoint()
                print(f"checkpoint of round {rnd} written", flush=True)


def driver(args) -> int:
    folder = Path(tempfile.mkdtemp(prefix="netstorm-recovery-"))
    ckpt = folder / "ckpt.npz"
    cmd = [sys.executable, str(REPO / "scripts" / "launch.py"), "--wan", args.wan,
           "--bandwidth-scale", str(args.bandwidth_scale), "--policy", "fapt",
           *(["--adapt"] if args.adapt else []),
           *(["--server-restarts", "1"] if args.replace else
             ["--checkpoint", str(ckpt), "--cluster-restarts", "1"]), "--timeout", "120", "--",
           sys.executable, str(Path(__file__).resolve()), "--worker", "--rounds",
           str(args.rounds), "--mb", str(args.mb), "--save-every",
           str(0 if args.replace else args.save_every)]
    env = dict(os.environ, TMPDIR=str(folder))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            text=True, start_new_session=True)
    rounds, killed, lines = [], {}, []
    for line in proc.stdout:
        lines.append(line)
        match = ROUND.search(line)
        if match:
            rounds.append((int(match.group(1)), float(match.group(2))))
            print(line, end="", flush=True)
        elif "[launch]" in line and ("restarting" in line or "killed" in line) or \
                "was replaced in" in line:
            print(line, end="", flush=True)
        if match and not killed and int(match.group(1)) == args.kill_after + 2:
            killed.update(round=int(match.group(1)), t=time.time(),
                          pid=_kill_server(args.kill, str(folder)))
            lines.append(f"[recovery_time] killed the server of {args.kill} at "
                         f"t={killed['t']:.3f}\n")
    code = proc.wait()
    shutil.rmtree(folder, ignore_errors=True)       # the run's checkpoint and sockets
    if args.log:
        Path(args.log).write_text("".join(lines))
    if code != 0 or not killed.get("pid"):
        print("".join(lines[-40:]), file=sys.stderr)
        print(f"recovery_time: run failed (exit {code}) or no server killed", file=sys.stderr)
        return 1
    return _report(rounds, killed, args)


def _kill_server(dc: str, marker: str) -> int:
    import psutil           # noqa: PLC0415
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        try:
            ours = proc.environ().get("TMPDIR") == marker
        except psutil.Error:
            continue
        if ours and "netstorm.geoserver" in cmd and dc in cmd:
            os.kill(proc.info["pid"], signal.SIGKILL)
            return proc.info["pid"]
    return 0


def _report(rounds, killed, args) -> int:
    before = [t1 - t0 for (r0, t0), (r1, t1) in zip(rounds, rounds[1:])
              if r1 == r0 + 1 and t1 <= killed["t"]][-8:]
    median = sorted(before)[len(before) // 2]
    after_kill = [(r, t) for r, t in rounds if t > killed["t"]]
    back = next((t for r, t in after_kill if r >= killed["round"] + args.replace), None)
    steady = None
    for (r0, t0), (r1, t1) in zip(after_kill, after_kill[1:]):
        if r1 == r0 + 1 and t1 - t0 <= 1.1 * median:
            steady = r1 - after_kill[0][0] + 1
            break
    how = "replaced from a peer's replica" if args.replace else \
        f"cluster restarted from the checkpoint of round {args.kill_after}"
    print(f"\nwan={args.wan} bandwidth_scale={args.bandwidth_scale} adapt={args.adapt} "
          f"model_mb={args.mb} killed=server of {args.kill} after round {killed['round']} "
          f"({how})")
    print(f"round time before the fault: median {median:.2f}s over {len(before)} rounds")
    if args.replace:
        print(f"round {killed['round'] + 1} done {back - killed['t']:.1f}s after the kill"
              if back else "no round done after the kill")
    else:
        print(f"back at round {killed['round']} after {back - killed['t']:.1f}s "
              f"(restart from the checkpoint + {killed['round'] - args.kill_after} rounds "
              f"recomputed)" if back else "never back at that round")
    print(f"rounds after the restart until one is within 10% of that median: {steady}"
          if steady else "no round after the restart within 10% of the median")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true", help="(internal) run as a worker")
    p.add_argument("--wan", default="paper9", help="topology: built-in name or file")
    p.add_argument("--bandwidth-scale", type=float, default=0.5,
                   help="multiply every link rate (0.5: network-bound on 2 cores)")
    p.add_argument("--kill", default="dc3", help="the DC whose server is killed")
    p.add_argument("--kill-after", type=int, default=10,
                   help="the checkpoint round; the kill comes two rounds later (with "
                        "--replace: after round KILL_AFTER + 2 too)")
    p.add_argument("--rounds", type=int, default=30, help="rounds in all")
    p.add_argument("--save-every", type=int, default=10, help="checkpoint period, rounds")
    p.add_argument("--mb", type=float, default=8.0, help="model size, MB (one key)")
    p.add_argument("--log", default=None, help="write every process's output here")
    p.add_argument("--adapt", action="store_true",
                   help="re-plan the trees from measured rates during the run")
    p.add_argument("--replace", action="store_true",
                   help="replace the lost server from a peer DC's replica (--server-restarts "
                        "1) instead of restarting the cluster from a checkpoint")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
