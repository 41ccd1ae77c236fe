"""SyncConfig: the [sync] setting, parsed once with errors naming the field; and each mode
end to end on live clusters (slow)."""
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
from netstorm.geoserver.config.sync import MAX_COUNT, SyncConfig, SyncError


def test_default_is_fully_synchronous_and_every_round_crosses_the_wan():
    sync = SyncConfig.from_params(None)
    assert sync.mode == "fsa" and not sync.local_steps and not sync.asynchronous
    assert [sync.wan_round(r) for r in (1, 2, 3)] == [1, 2, 3]
    assert all(sync.crosses_wan(r) for r in (1, 2, 3))


def test_hfa_groups_k2_dc_rounds_into_one_wan_round():
    sync = SyncConfig.from_params({"mode": "hfa", "k1": 4, "k2": 3})
    assert sync.local_steps and (sync.k1, sync.k2) == (4, 3)
    assert [sync.wan_round(r) for r in range(1, 8)] == [1, 1, 1, 2, 2, 2, 3]
    assert [r for r in range(1, 10) if sync.crosses_wan(r)] == [3, 6, 9]


def test_esync_and_mixed_cross_the_wan_every_round():
    for sync in (SyncConfig(mode="esync", k2=5), SyncConfig(mode="mixed")):
        assert sync.rounds_per_wan_round == 1 and sync.crosses_wan(1)
    assert SyncConfig(mode="mixed").asynchronous and SyncConfig(mode="esync").local_steps


@pytest.mark.parametrize("params,message", [
    ({"mode": "hfa", "k1": 0}, r"k1 must be a whole number in 1\.\."),
    ({"mode": "hfa", "k2": 2.5}, r"k2 must be a whole number"),
    ({"mode": "hfa", "k2": True}, r"k2 must be a whole number"),
    ({"mode": "mixed", "staleness": -1}, r"staleness must be a whole number in 0\.\."),
    ({"mode": "esync", "max_steps": MAX_COUNT + 1}, r"max_steps must be"),
    ({"mode": "hfa", "staleness": 2}, r"mode 'hfa' takes no 'staleness' \(it takes 'k1', "
                                      r"'k2'\)"),
    ({"mode": "fsa", "k1": 2}, r"mode 'fsa' takes no 'k1' \(it takes nothing\)"),
    ({"mode": "dcasgd"}, r"sync mode 'dcasgd' is unknown; accepted: 'fsa', 'hfa'"),
    ("hfa", r"must be a table"),
])
def test_bad_settings_name_the_field(params, message):
    with pytest.raises(SyncError, match=message):
        SyncConfig.from_params(params)


def test_the_flag_form_reads_back_what_describe_writes():
    for text in ("fsa", "hfa:k1=4,k2=2", "mixed:staleness=0", "esync:max_steps=3"):
        sync = SyncConfig.parse(text)
        assert sync.describe() == text and SyncConfig.parse(sync.describe()) == sync
    assert SyncConfig.parse("hfa:k1=3") == SyncConfig(mode="hfa", k1=3)
    with pytest.raises(SyncError, match=r"--sync: expected NAME=N after 'hfa:', got 'k1'"):
        SyncConfig.parse("hfa:k1")
    with pytest.raises(SyncError, match=r"--sync: sync mode 'mixed' takes no 'k1'"):
        SyncConfig.parse("mixed:k1=2")


def test_json_round_trip_and_malformed_json_refused():
    sync = SyncConfig(mode="hfa", k1=2, k2=5)
    assert SyncConfig.from_json(sync.to_json()) == sync
    assert sync.to_params() == {"mode": "hfa", "k1": 2, "k2": 5}
    for bad in ([], {"mode": "hfa"}, {**sync.to_json(), "extra": 1}):
        with pytest.raises(SyncError):
            SyncConfig.from_json(bad)


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
    """Momentum SGD, 2 DCs x 2 workers: the sum of the workers' deltas is fsa's update
    (momentum included, since each worker's momentum adds up to the sum's)."""
    _, fsa = _train(no_leftovers, "fsa", "fsa", "--steps", 6)
    _, hfa = _train(no_leftovers, "hfa", "hfa:k1=1,k2=1", "--steps", 6)
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
def test_mixed_a_stopped_or_killed_dc_is_a_clear_error_within_the_timeout(no_leftovers, sig):
    """The other DC does not go on alone past the staleness bound, nor hang: the launcher
    sees its own child killed at once; a stopped one, the scheduler names after
    dead_after_s; every node stops and the launcher fails, naming it."""
    dead_after_s, timeout_s = 2.0, 20.0
    config = pseudo_cluster(2, 1, free_port(), heartbeat_s=0.2, dead_after_s=dead_after_s,
                            timeout_s=timeout_s, sync=SyncConfig(mode="mixed", staleness=1))
    cluster = no_leftovers / "cluster.toml"
    cluster.write_text(to_toml(config))
    out = no_leftovers / "out"
    out.mkdir()
    argv = [sys.executable, str(REPO / "scripts" / "launch.py"), "--cluster", str(cluster),
            "--", *worker_cmd("sync_worker.py", out, "--steps", 100000, "--optimizer",
                              "dcasgd")]
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
