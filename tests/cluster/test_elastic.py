"""Elastic data centers, live (docs/recovery-elastic.md): a DC joins a running cluster and
another leaves it, and the others go on. The membership logic alone is tested in
tests/unit/test_membership.py, test_departing.py and test_joining.py."""

import re
import threading
import time

import mxnet as mx
import numpy as np
import pytest
from launching import free_port, launch, leftovers, worker_cmd
from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.config.cluster_toml import to_toml

from cluster.test_recovery import _kill_server_when
from unit.test_recovery import _spec, _values

_spec.loader.exec_module(_values)       # the worker scripts' own gradients

OPTIMIZER, SHAPES, gradient = _values.OPTIMIZER, _values.SHAPES, _values.gradient
ROUNDS, JOIN_AT, HOLD_AT, KILL_AT = 30, 5, 12, 20


def contributed(key: int, rounds: int, ranks_of_round) -> np.ndarray:
    """fsa: key ``key``'s weights when round ``r`` sums the gradients of
    ``ranks_of_round(r)`` (MXNet's own updater; the sums are exact)."""
    updater = mx.optimizer.get_updater(mx.optimizer.create("sgd", **OPTIMIZER))
    weights = mx.nd.ones(SHAPES[key])
    for rnd in range(1, rounds + 1):
        updater(key, mx.nd.array(sum(gradient(key, rnd, r) for r in ranks_of_round(rnd))),
                weights)
    return weights.asnumpy()


def averaged(key: int, rounds: int, ranks_of_round) -> np.ndarray:
    """diloco with h = 1 and a plain outer step (lr 1, no momentum): key ``key``'s weights
    when round ``r`` averages the inner steps of ``ranks_of_round(r)``, each rank's own
    SGD with momentum from the round's weights (a rank's momentum starts when it does)."""
    inner: dict = {}
    weights = np.ones(SHAPES[key], np.float32)
    for rnd in range(1, rounds + 1):
        ranks = ranks_of_round(rnd)
        total = np.zeros_like(weights)
        for rank in ranks:
            updater = inner.setdefault(rank, mx.optimizer.get_updater(
                mx.optimizer.create("sgd", **OPTIMIZER)))
            mine = mx.nd.array(weights)
            updater(key, mx.nd.array(gradient(key, rnd, rank)), mine)
            total += mine.asnumpy() - weights
        weights = weights + total / np.float32(len(ranks))
    return weights


@pytest.mark.slow
@pytest.mark.parametrize("sync", ["fsa", "diloco:h=1,outer_lr=1,outer_momentum=0"],
                         ids=["fsa", "diloco"])
def test_elastic_a_dc_joins_and_one_leaves_a_live_3dc_run_the_others_never_stop(no_leftovers,
                                                                                sync):
    """``--dcs 2:4``: dc0-dc2 start; once rank 0 finished round 5, dc3 is started and joins
    the running cluster (its server copies the members' replicas, checked by digest; rank
    0 waits after round 12 until dc3's worker started, so the run cannot end first), then
    dc2's server is SIGKILLed as rank 0 finishes round 20 of 30 and dc2 leaves. dc0, dc1
    and dc3 finish every round with identical replicas, equal to MXNet's updater on the
    sums of ranks 0-2 up to the join's replay round, of ranks 0-3 up to the departure's,
    and of ranks 0, 1, 3 after it (fsa); under diloco, to the average of those ranks'
    inner steps (the divisor follows the members: 3, 4, then 3)."""
    cue, out = no_leftovers / "cue", no_leftovers / "out"
    join_cue, started = no_leftovers / "join", no_leftovers / "started"
    out.mkdir()
    killed = []
    killer = threading.Thread(target=_kill_server_when, args=(cue, "dc2", no_leftovers, killed))
    killer.start()
    run = launch(["--dcs", "2:4", "--workers-per-dc", 1, "--policy", "star", "--join", "dc3",
                  "--join-after", 0, "--join-when", join_cue, "--sync", sync],
                 worker_cmd("recover_worker.py", ROUNDS, out, "--mark-at", KILL_AT, cue,
                            "--mark-at", JOIN_AT, join_cue, "--started-mark", started,
                            "--hold-at", HOLD_AT, f"{started}.3", "--pause", 0.05),
                 no_leftovers, timeout=300)
    killer.join()
    assert killed, run.output[-3000:]
    assert run.code == 0, run.output[-6000:]
    assert "policy over dc0, dc1, dc2 (dc3 may join)" in run.output, run.output[-6000:]
    assert "[launch] starting dc3: joining the running cluster" in run.output
    assert "dc3 joined the run in" in run.output, run.output[-6000:]
    assert "[launch] server dc2 was killed by SIGKILL; dc2 leaves the run (3 DC(s) remain, " \
        "min_dcs 2)" in run.output, run.output[-6000:]
    assert "dc2 left the run; the 3 members went on" in run.output, run.output[-6000:]
    joined = int(re.search(r"replay policy 2 over dc0, dc1, dc2, dc3 from round (\d+)",
                           run.output)[1])
    left = int(re.search(r"replay policy 3 over dc0, dc1, dc3 from round (\d+)",
                         run.output)[1])
    assert JOIN_AT < joined <= HOLD_AT + 1 < left, run.output[-6000:]   # joined mid-run
    finals = {rank: np.load(out / f"rank{rank}.npz") for rank in (0, 1, 3)}
    if sync == "fsa":
        want, same = contributed, np.array_equal
    else:       # the servers divide the tree's sum of the deltas: float rounding apart
        want, same = averaged, lambda a, b: np.allclose(a, b, rtol=1e-5, atol=1e-6)
    for key in SHAPES:
        for rank in (1, 3):
            np.testing.assert_array_equal(finals[0][str(key)], finals[rank][str(key)],
                                          err_msg=f"key {key}: ranks 0 and {rank} differ")
        # a key a round ahead of the replay's first round (applied everywhere) switches then
        fits = [(j, k) for j in (joined - 1, joined) for k in (left - 1, left)
                if same(finals[0][str(key)], want(
                    key, ROUNDS, lambda r: (0, 1, 2) if r < j else (0, 1, 2, 3) if r < k
                    else (0, 1, 3)))]
        assert fits, f"key {key}: the weights are not those of the joins and leaves logged"


def _stop_dc_when(cue, dc: str, tmpdir, seconds: float, stopped: list) -> None:
    """SIGSTOP every process of ``dc`` (server and workers) of the run started with TMPDIR
    ``tmpdir`` once ``cue`` exists, and SIGCONT them ``seconds`` later."""
    import os
    import signal

    import psutil
    deadline = time.monotonic() + 120
    while not cue.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    for proc in leftovers(str(tmpdir)):         # this run's processes
        try:
            env, cmd = proc.environ(), proc.info["cmdline"] or []
        except psutil.Error:
            continue
        if "netstorm.geoserver" in cmd and dc in cmd or \
                env.get("NETSTORM_DC") == dc and "recover_worker.py" in " ".join(cmd):
            os.kill(proc.pid, signal.SIGSTOP)
            stopped.append(proc.pid)
    time.sleep(seconds)
    for pid in stopped:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.slow
def test_elastic_a_stopped_dc_leaves_at_once_and_rejoins_when_it_wakes(no_leftovers):
    """``min_dcs = 2`` of 3, ``rejoins = 1``: dc2's server and worker are SIGSTOPped after
    round 8 for 4 s. dc2 leaves at its server's learnt deadline (well under dead_after_s =
    10 s), so dc0 and dc1 go on; when it wakes it is told it left, its server exits
    (EXIT_LEFT), and the launcher starts dc2 again, which joins from a replica and
    finishes every round. All three end with identical replicas, equal to MXNet's updater
    on the sums of ranks 0-2, then 0-1 while dc2 was away, then 0-2 again."""
    cue, out, resumed = no_leftovers / "cue", no_leftovers / "out", no_leftovers / "resumed"
    out.mkdir()
    config = pseudo_cluster(3, 1, free_port(), heartbeat_s=0.2, dead_after_s=10.0,
                            timeout_s=60.0, min_dcs=2, rejoins=1)
    cluster = no_leftovers / "cluster.toml"
    cluster.write_text(to_toml(config))
    stopped = []
    stopper = threading.Thread(target=_stop_dc_when,
                               args=(cue, "dc2", no_leftovers, 4.0, stopped))
    stopper.start()
    hold = 22       # rank 0 waits there for dc2's new worker: the run cannot end first
    run = launch(["--cluster", cluster],
                 worker_cmd("recover_worker.py", ROUNDS, out, "--mark-at", 8, cue,
                            "--resumed-mark", resumed, "--hold-at", hold, f"{resumed}.2",
                            "--pause", 0.05),
                 no_leftovers, timeout=300)
    stopper.join()
    assert len(stopped) == 2, (stopped, run.output[-3000:])
    text = run.output
    assert run.code == 0, text[-6000:]
    assert "dc2 leaves the run for the time being (it may rejoin)" in text, text[-6000:]
    assert "[launch] server dc2 exited with code 5; dc2 leaves the run" in text, text[-6000:]
    assert "[launch] starting dc2 again: it rejoins the running cluster" in text
    assert "dc2 joined the run in" in text, text[-6000:]
    verdict = re.search(r"verdict at [\d.]+: [^\n]*dc2[^\n]* sent nothing for ([\d.]+)s", text)
    assert verdict and float(verdict[1]) < config.dead_after_s, text[-6000:]
    left = int(re.search(r"replay policy 2 over dc0, dc1 from round (\d+)", text)[1])
    back = int(re.search(r"replay policy 3 over dc0, dc1, dc2 from round (\d+)", text)[1])
    assert 8 < left < back <= hold + 1, text[-6000:]
    finals = {rank: np.load(out / f"rank{rank}.npz") for rank in range(3)}
    for key in SHAPES:
        for rank in (1, 2):
            np.testing.assert_array_equal(finals[0][str(key)], finals[rank][str(key)],
                                          err_msg=f"key {key}: ranks 0 and {rank} differ")
        fits = [(j, k) for j in (left - 1, left) for k in (back - 1, back)
                if np.array_equal(finals[0][str(key)], contributed(
                    key, ROUNDS, lambda r: (0, 1, 2) if r < j else (0, 1) if r < k
                    else (0, 1, 2)))]
        assert fits, f"key {key}: the weights are not those of the leave and rejoin logged"
