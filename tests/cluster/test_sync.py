"""sync: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_sync.py."""

import os
import re
import signal
import subprocess
import sys
import time
import numpy as np
import pytest
from launching import REPO, free_port, launch, leftovers, worker_cmd
from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.sync import SyncConfig


# ---------------------------------------------------------------- live clusters
def _weights(path):
    import mxnet as mx
    from workers import trainer_worker as tw
    net = tw.build_net([mx.cpu(0)])
    net.load_parameters(str(path))
    return {k: v.data().asnumpy() for k, v in net._collect_params_with_prefix().items()}


def _train(tmp, name, sync, *args, dcs=2, workers=2, options=()):
    out = tmp / name
    out.mkdir()
    run = launch(["--dcs", dcs, "--workers-per-dc", workers, "--sync", sync, *options],
                 worker_cmd("sync_worker.py", out, *args), tmp)
    assert run.code == 0, run.output[-5000:]
    return run, [_weights(out / f"rank{r}.params") for r in range(dcs * workers)]


@pytest.mark.slow
def test_hfa_with_k1_and_k2_of_1_equals_fsa(no_leftovers):
    """Momentum SGD, 2 DCs x 2 workers: the average of the workers' deltas is fsa's update
    of the averaged gradient (fsa sums: its learning rate / 4), momentum included, since
    each worker's momentum averages to the average's."""
    _, fsa = _train(no_leftovers, "fsa", "fsa", "--steps", 6, "--lr", 0.1 / 4)
    _, hfa = _train(no_leftovers, "hfa", "hfa:k1=1,k2=1", "--steps", 6, "--lr", 0.1)
    for rank, (want, got) in enumerate(zip(fsa, hfa)):
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-6,
                                       err_msg=f"rank {rank} {name}")
            assert not np.allclose(want[name], fsa[0][name] * 0), "weights never moved"


@pytest.mark.slow
def test_hfa_local_steps_end_every_wan_round_with_the_same_weights_everywhere(no_leftovers):
    """k1 = 2, k2 = 2, 8 steps: the last step ends a WAN round, so every worker of every DC
    holds the same weights, and they differ from fsa's (local steps changed the math)."""
    _, fsa = _train(no_leftovers, "fsa", "fsa", "--steps", 8)
    run, hfa = _train(no_leftovers, "hfa", "hfa:k1=2,k2=2", "--steps", 8)
    assert run.output.count("8 steps in 4 rounds") == 4
    for name in hfa[0]:
        assert all(np.array_equal(w[name], hfa[0][name]) for w in hfa), name
    assert any(not np.allclose(hfa[0][n], fsa[0][n], atol=1e-4) for n in fsa[0])


@pytest.mark.slow
def test_hfa_runs_on_replanned_multi_root_trees_with_compression(no_leftovers):
    """3 DCs, fapt trees re-planned from measurements (the round gate counts WAN rounds),
    fp16 compression of the deltas: every WAN round still ends with one set of weights."""
    run, hfa = _train(no_leftovers, "hfa", "hfa:k1=2,k2=2", "--steps", 8, dcs=3, workers=1,
                      options=("--policy", "fapt", "--adapt", "--compression", "fp16"))
    assert run.output.count("8 steps in 4 rounds") == 3
    for name in hfa[0]:
        assert all(np.array_equal(w[name], hfa[0][name]) for w in hfa), name


@pytest.mark.slow
def test_diloco_with_h_1_plain_sgd_and_a_plain_outer_step_equals_fsa(no_leftovers):
    """2 DCs x 2 workers, plain SGD inner steps, outer lr 1 without momentum: each outer
    round sets the weights to the workers' average, which is fsa's step on the averaged
    gradient (fsa sums the gradients: its learning rate / 4)."""
    _, fsa = _train(no_leftovers, "fsa", "fsa", "--steps", 6, "--lr", 0.1 / 4,
                    "--momentum", 0)
    _, diloco = _train(no_leftovers, "diloco", "diloco:h=1,outer_lr=1,outer_momentum=0",
                       "--steps", 6, "--lr", 0.1, "--momentum", 0)
    for rank, (want, got) in enumerate(zip(fsa, diloco)):
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-6,
                                       err_msg=f"rank {rank} {name}")


@pytest.mark.slow
@pytest.mark.parametrize("compression", ["fp16", "int8", "topk2bit"])
def test_diloco_replicas_are_bit_identical_after_every_outer_round(no_leftovers, compression):
    """3 DCs x 2 workers, h = 3, Nesterov outer steps, fapt trees re-planned from
    measurements, compressed pseudo-gradients: after each of the 4 outer rounds every
    worker of every DC holds the same bits (what its DC server's replica sent it)."""
    run, weights = _train(no_leftovers, "diloco", "diloco:h=3", "--steps", 12, "--digests",
                          dcs=3, options=("--policy", "fapt", "--adapt", "--compression",
                                          compression))
    digests: dict = {}
    for rank, rnd, digest in re.findall(r"rank (\d) round (\d+) weights (\w+)", run.output):
        digests.setdefault(int(rnd), {})[int(rank)] = digest
    assert sorted(digests) == [1, 2, 3, 4], run.output[-3000:]
    for rnd, by_rank in digests.items():
        assert len(by_rank) == 6 and len(set(by_rank.values())) == 1, (rnd, by_rank)
    assert run.output.count("12 steps in 4 rounds") == 6


@pytest.mark.slow
def test_diloco_streams_fragments_and_every_worker_finishes(no_leftovers):
    """h = 4 in 2 fragments, results merged one step late: each key synchronizes 3 times
    in 12 steps, and training ends everywhere."""
    run, _ = _train(no_leftovers, "streaming", "diloco:h=4,fragments=2,delay=1,mix=0.5",
                    "--steps", 12)
    assert run.output.count("12 steps in 3 rounds") == 4, run.output[-3000:]


@pytest.mark.slow
def test_esync_gives_the_fast_dc_more_steps_per_round_and_finishes(no_leftovers):
    """dc1's worker is slower: dc0's takes several steps per round, so it finishes its
    steps in fewer rounds; dc1 goes on alone afterwards (dc0's server sends zeros)."""
    run, _ = _train(no_leftovers, "esync", "esync:max_steps=4", "--steps", 30,
                    "--slow-dc", "dc1", "--slow-s", 0.3, workers=1)
    rounds = {int(m.group(1)): int(m.group(2)) for m in
              re.finditer(r"rank (\d) done: 30 steps in (\d+) rounds", run.output)}
    assert rounds[1] == 30 and rounds[0] <= 20, rounds


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGKILL])
@pytest.mark.parametrize("sync", ["mixed:staleness=1", "diloco:h=5"])
def test_a_stopped_or_killed_dc_is_a_clear_error_within_the_timeout(no_leftovers, sig, sync):
    """The other DC does not go on alone (past mixed's staleness bound, or into diloco's
    next outer round), nor hang: the launcher sees its own child killed at once; a stopped
    one, the scheduler names after dead_after_s; every node stops and the launcher fails,
    naming it."""
    dead_after_s, timeout_s = 2.0, 20.0
    config = pseudo_cluster(2, 1, free_port(), heartbeat_s=0.2, dead_after_s=dead_after_s,
                            timeout_s=timeout_s, sync=SyncConfig.parse(sync))
    cluster = no_leftovers / "cluster.toml"
    cluster.write_text(to_toml(config))
    out = no_leftovers / "out"
    out.mkdir()
    argv = [sys.executable, str(REPO / "scripts" / "launch.py"), "--cluster", str(cluster),
            "--", *worker_cmd("sync_worker.py", out, "--steps", 100000, "--optimizer",
                              "dcasgd" if sync.startswith("mixed") else "sgd")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, TMPDIR=str(no_leftovers)), cwd=REPO)
    lines, named_at = [], None
    try:
        for line in proc.stdout:
            lines.append(line)
            if "rank 1 step 30" in line:
                break
        victim = next((p for p in leftovers(str(no_leftovers))
                       if "netstorm.geoserver" in " ".join(p.cmdline()) and
                       "dc1" in p.cmdline()), None)
        assert victim is not None, ("no server of dc1 to signal; the launcher said:",
                                    "".join(lines)[-3000:], proc.poll())
        victim.send_signal(sig)
        hit = time.monotonic()
        for line in proc.stdout:
            lines.append(line)
            if named_at is None and ("server of dc1 (node 2) sent nothing" in line or
                                     "server dc1 was killed by SIGKILL" in line):
                named_at = time.monotonic() - hit
        proc.wait(timeout=timeout_s)
        took = time.monotonic() - hit
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in leftovers(str(no_leftovers)):
            p.send_signal(signal.SIGCONT)
            p.kill()
    text = "".join(l for l in lines if " step " not in l)
    failed = [l for l in lines if "stopping the cluster" in l]
    assert proc.returncode != 0 and failed, text[-3000:]
    assert "server of dc1" in failed[0] or "server dc1" in failed[0], failed
    assert named_at is not None and named_at < dead_after_s + 3, (named_at, text[-3000:])
    assert took < timeout_s, (took, text[-3000:])
