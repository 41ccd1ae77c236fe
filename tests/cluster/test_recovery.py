"""recovery: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_recovery.py."""

import numpy as np
import pytest
from launching import launch, worker_cmd
from netstorm.geoserver.core.wire import Kind, Message

from unit.test_recovery import _spec, _values, uninterrupted

_spec.loader.exec_module(_values)       # the worker scripts' own gradients

OPTIMIZER, SHAPES, gradient = _values.OPTIMIZER, _values.SHAPES, _values.gradient
ROUNDS, WORKER_COUNT = 30, 4



# ------------------------------------------------------------ in process (geoserver/server/recovery.py)
DCS, CHUNK_BYTES = ("a", "b", "c"), 16 << 10


@pytest.mark.slow
@pytest.mark.parametrize("rank, name, node, kill_round", [(3, "dc1/1", 6, 10),
                                                         (0, "dc0/0", 3, 5)])
def test_recover_a_killed_worker_into_its_rank_exactly(no_leftovers, rank, name, node,
                                                       kill_round):
    """A worker dies (SIGKILL) in a round after pushing key 0, before key 1: the launcher
    restarts it, it rejoins, skips the rounds it had completed, does not push key 0 of that
    round again (nor, as rank 0, re-initialize the model), and every worker ends with the
    weights of an uninterrupted run."""
    out = no_leftovers / "out"
    out.mkdir()
    run = launch(["--dcs", 2, "--workers-per-dc", 2, "--worker-restarts", 1],
                 worker_cmd("recover_worker.py", ROUNDS, out, "--kill", rank, kill_round),
                 no_leftovers)
    assert run.code == 0, run.output[-4000:]
    assert f"worker {name} was killed by SIGKILL; restarting it into its rank (1 of 1)" \
        in run.output
    assert f"worker rank {rank} ({name}, node {node}) rejoined" in run.output
    assert f"[worker {name}] rank {rank} starts after round {kill_round - 1}" in run.output
    want = uninterrupted(ROUNDS, WORKER_COUNT)
    for rank in range(WORKER_COUNT):
        got = np.load(out / f"rank{rank}.npz")
        for key in SHAPES:
            np.testing.assert_array_equal(got[str(key)], want[key], err_msg=f"rank {rank}")


@pytest.mark.slow
def test_recover_gives_up_naming_the_worker_once_its_restarts_are_used(no_leftovers):
    """A worker that dies again after its one restart: the run fails naming it."""
    run = launch(["--dcs", 2, "--workers-per-dc", 1, "--worker-restarts", 1],
                 worker_cmd("fault_worker.py", "die-rank1"), no_leftovers)
    assert run.code != 0
    assert "worker dc1/0 was killed by SIGKILL; restarting it into its rank (1 of 1)" \
        in run.output
    assert "[launch] worker dc1/0 was killed by SIGKILL; stopping the cluster" in run.output, \
        run.output[-3000:]


def _final_weights(out) -> list:
    return [np.load(out / f"rank{rank}.npz") for rank in range(WORKER_COUNT)]


@pytest.mark.slow
def test_recover_from_a_checkpoint_written_while_training(no_leftovers):
    """Rank 0 writes a checkpoint after round 12 and training goes on to 30; a new run
    started from it (--resume) goes on after round 12: both end with the weights of an
    uninterrupted run, bit for bit (values, optimizer states and their counts restored)."""
    want = uninterrupted(ROUNDS, WORKER_COUNT)
    ckpt = no_leftovers / "at12.npz"
    runs = {}
    for name, flags, extra in [("first", [], ["--save-at", 12, ckpt]),
                               ("resumed", ["--resume", ckpt], [])]:
        out = no_leftovers / name
        out.mkdir()
        runs[name] = run = launch(["--dcs", 2, "--workers-per-dc", 2, *flags],
                                  worker_cmd("recover_worker.py", ROUNDS, out, *extra),
                                  no_leftovers)
        assert run.code == 0, run.output[-4000:]
        for rank, got in enumerate(_final_weights(out)):
            for key in SHAPES:
                np.testing.assert_array_equal(got[str(key)], want[key], err_msg=f"{name} {rank}")
    assert "[worker dc0/0] checkpoint of round 12 written" in runs["first"].output
    assert all(f"rank {r} starts after round 12" in runs["resumed"].output for r in range(4))


@pytest.mark.slow
def test_recover_refuses_a_corrupted_checkpoint_naming_it(no_leftovers, tmp_path):
    from netstorm.geoserver.model import checkpoint
    path = tmp_path / "c.npz"
    checkpoint.write(path, checkpoint.Checkpoint(3, {0: np.ones((6, 5), np.float32)}))
    assert checkpoint.read(path).round == 3
    data = bytearray(path.read_bytes())
    at = data.find(np.ones(4, np.float32).tobytes())
    data[at] ^= 0xFF                                    # one byte of key 0's value
    path.write_bytes(bytes(data))
    run = launch(["--dcs", 2, "--resume", path], worker_cmd("recover_worker.py", 3,
                                                            no_leftovers), no_leftovers)
    assert run.code != 0
    assert "[recovery] resume:" in run.output and str(path) in run.output, run.output[-3000:]


def _kill_server_when(cue, dc: str, tmpdir, killed: list) -> None:
    """SIGKILL ``dc``'s server of the run started with TMPDIR ``tmpdir`` once ``cue`` (a
    file) exists."""
    import os
    import signal
    import time

    import psutil
    deadline = time.monotonic() + 120
    while not cue.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        try:
            ours = proc.environ().get("TMPDIR") == str(tmpdir)      # this test's
        except psutil.Error:
            continue
        if ours and "netstorm.geoserver" in cmd and dc in cmd:
            os.kill(proc.info["pid"], signal.SIGKILL)
            killed.append(proc.info["pid"])


@pytest.mark.slow
@pytest.mark.parametrize("dcs, workers_per_dc, policy, kill_at, how", [
    (2, 2, "star", 10, []), (3, 1, "fapt", 7, ["--pushpull"])])
def test_recover_a_killed_server_from_a_peer_replica_exactly(no_leftovers, dcs, workers_per_dc,
                                                              policy, kill_at, how):
    """dc1's server SIGKILLed mid-training: the launcher starts a new one, which copies a
    peer DC's replica (checked against the digest its source reported) while the other
    servers wait; every DC replays the rounds in flight, dc1's workers send the new server
    the pushes it lacks, and every worker ends with the weights of an uninterrupted run,
    bit for bit (so every DC's replica is identical)."""
    import threading
    cue, out = no_leftovers / "cue", no_leftovers / "out"
    out.mkdir()
    killed = []
    killer = threading.Thread(target=_kill_server_when, args=(cue, "dc1", no_leftovers, killed))
    killer.start()
    run = launch(["--dcs", dcs, "--workers-per-dc", workers_per_dc, "--policy", policy,
                  "--server-restarts", 1],
                 worker_cmd("recover_worker.py", ROUNDS, out, "--mark-at", kill_at, cue,
                            *how),
                 no_leftovers, timeout=240)
    killer.join()
    assert killed, run.output[-3000:]
    assert run.code == 0, run.output[-6000:]
    assert "[launch] server dc1 was killed by SIGKILL; replacing it from a peer DC's " \
        "replica (1 of 1)" in run.output
    assert "the server of dc1 was replaced in" in run.output, run.output[-4000:]
    want = uninterrupted(ROUNDS, dcs * workers_per_dc)
    for rank in range(dcs * workers_per_dc):
        got = np.load(out / f"rank{rank}.npz")
        for key in SHAPES:
            np.testing.assert_array_equal(got[str(key)], want[key], err_msg=f"rank {rank}")


@pytest.mark.slow
def test_recover_from_a_killed_server_by_restarting_the_cluster_from_its_checkpoint(
        no_leftovers):
    """dc1's server SIGKILLed after the checkpoint of round 10 was written: the launcher
    restarts the whole cluster from it, the workers go on after round 10, and every worker
    ends with the weights of an uninterrupted run, bit for bit."""
    import threading
    ckpt = no_leftovers / "ckpt.npz"
    out = no_leftovers / "out"
    out.mkdir()
    killed = []
    killer = threading.Thread(target=_kill_server_when, args=(ckpt, "dc1", no_leftovers, killed))
    killer.start()
    run = launch(["--dcs", 2, "--workers-per-dc", 2, "--checkpoint", ckpt,
                  "--cluster-restarts", 1],
                 worker_cmd("recover_worker.py", ROUNDS, out, "--save-every", 10,
                            "--pause", 0.1), no_leftovers, timeout=240)
    killer.join()
    assert killed, run.output[-3000:]
    assert run.code == 0, run.output[-4000:]
    assert "[launch] server dc1 was killed by SIGKILL; stopping the cluster" in run.output
    assert f"[launch] restarting the whole cluster from {ckpt} (round 10; 1 of 1)" \
        in run.output
    assert all(f"rank {r} starts after round 10" in run.output for r in range(4))
    want = uninterrupted(ROUNDS, WORKER_COUNT)
    for rank, got in enumerate(_final_weights(out)):
        for key in SHAPES:
            np.testing.assert_array_equal(got[str(key)], want[key], err_msg=f"rank {rank}")


@pytest.mark.slow
def test_recover_leaves_a_live_run_alone_when_a_peer_sends_replica_messages_unasked(
        no_leftovers):
    """Issue 34, live (2 DCs x 1 worker, exact sums): with dc1's key, dc0's server gets a
    STATE_REQUEST and a STATE that no recovery asked for while the cluster trains. It drops
    and logs both, answering nothing (an answer would stop dc1's real server), and the run
    ends with every sum exact."""
    import time

    import zmq
    from live_cluster import Cluster
    from netstorm.geoserver.config.keys import read_key_pair
    from netstorm.geoserver.core import wire
    from netstorm.geoserver.server.replica import KeyReplica, encode
    cluster = Cluster(no_leftovers)
    dc0, dc1 = cluster.workers
    server_dc1 = 2                                      # live_cluster's node ids
    value = np.zeros(64 * 33, np.float32)               # fuzz_worker.py's key 0
    meta, frames = encode([KeyReplica(0, cluster.rounds(), (64, 33), np.dtype(np.float32),
                                      False, value)], None, None)
    ctx = zmq.Context()
    with cluster.attacked(ctx):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, 2000)
        sock.curve_serverkey = read_key_pair(dc0["key_file"]).public
        pair = read_key_pair(dc1["key_file"])
        sock.curve_publickey, sock.curve_secretkey = pair.public, pair.secret
        sock.connect(dc0["server"])
        for msg in (Message(Kind.STATE_REQUEST, sender=server_dc1, meta={"keys": [0]}),
                    Message(Kind.STATE, sender=server_dc1, meta=meta, dtype=np.uint8,
                            frames=frames)):
            sock.send_multipart(wire.encode(msg))
        rounds = cluster.rounds()
        deadline = time.monotonic() + 30          # training goes on: three more rounds
        while cluster.rounds() < rounds + 3 and not cluster.dead() and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert not cluster.dead() and cluster.rounds() >= rounds + 3, cluster.dead()
        sock.close(linger=2000)                   # what is still queued goes out first
        cluster.stop_after(5)
    run = cluster.exact_run()
    server0 = "\n".join(run.lines("server dc0"))
    assert "dc0: dropped STATE_REQUEST from dc1: this server is in no recovery" in server0
    assert "dc0: dropped STATE from dc1: no replica is awaited here" in server0


def _killed_server_run(no_leftovers, name, flags, kill_at=10):
    """A 2 DC x 2 worker run of recover_worker.py with ``flags`` whose dc1 server is
    SIGKILLed as rank 0 finishes round ``kill_at`` and replaced; its final weights."""
    import threading
    cue, out = no_leftovers / f"cue-{name}", no_leftovers / name
    out.mkdir()
    killed = []
    killer = threading.Thread(target=_kill_server_when, args=(cue, "dc1", no_leftovers, killed))
    killer.start()
    run = launch(["--dcs", 2, "--workers-per-dc", 2, "--server-restarts", 1, *flags],
                 worker_cmd("recover_worker.py", ROUNDS, out, "--mark-at", kill_at, cue),
                 no_leftovers, timeout=240)
    killer.join()
    assert killed, run.output[-3000:]
    assert run.code == 0, run.output[-6000:]
    assert "the server of dc1 was replaced in" in run.output, run.output[-4000:]
    return _final_weights(out)


@pytest.mark.slow
def test_recover_a_killed_server_under_compression_exactly(no_leftovers):
    """fsa with fp16 compression (the integer sums are exact in half precision, so the
    residuals stay zero and the uninterrupted run is MXNet's updater on the sums): dc1's
    server SIGKILLed mid-training is replaced (replayable error feedback, the STATE's new
    fields over the wire), and every worker ends bit-identical to the uninterrupted run."""
    want = uninterrupted(ROUNDS, WORKER_COUNT)
    got = _killed_server_run(no_leftovers, "fp16", ["--compression", "fp16"])
    for rank, weights in enumerate(got):
        for key in SHAPES:
            np.testing.assert_array_equal(weights[str(key)], want[key], err_msg=f"rank {rank}")


@pytest.mark.slow
def test_recover_a_killed_server_under_diloco_exactly(no_leftovers):
    """diloco (h = 1, SGD with momentum inside, the outer Nesterov step on the servers):
    dc1's server SIGKILLed mid-training copies a peer's value and outer momentum (checked
    by digest), and every worker ends bit-identical to an uninterrupted run's (2 x 2
    workers: every sum has two operands, so the same in any order)."""
    flags = ["--sync", "diloco:h=1"]
    got = _killed_server_run(no_leftovers, "killed", flags)
    out = no_leftovers / "whole"
    out.mkdir()
    run = launch(["--dcs", 2, "--workers-per-dc", 2, *flags],
                 worker_cmd("recover_worker.py", ROUNDS, out), no_leftovers, timeout=240)
    assert run.code == 0, run.output[-4000:]
    for rank, (weights, want) in enumerate(zip(got, _final_weights(out))):
        for key in SHAPES:
            np.testing.assert_array_equal(weights[str(key)], want[str(key)],
                                          err_msg=f"rank {rank}")


@pytest.mark.slow
def test_recover_two_servers_killed_at_once_exactly(no_leftovers):
    """3 DCs x 1 worker, multi-root trees: the servers of dc1 and dc2 SIGKILLed at the same
    moment (as rank 0 finishes round 7). The launcher restarts both; the scheduler makes
    one plan from dc0's replica (or starts again when the second loss is seen late), and
    every worker ends with the weights of an uninterrupted run, bit for bit."""
    import threading
    cue, out = no_leftovers / "cue", no_leftovers / "out"
    out.mkdir()
    killed = []
    killers = [threading.Thread(target=_kill_server_when, args=(cue, dc, no_leftovers, killed))
               for dc in ("dc1", "dc2")]
    for killer in killers:
        killer.start()
    run = launch(["--dcs", 3, "--workers-per-dc", 1, "--policy", "fapt",
                  "--server-restarts", 1],
                 worker_cmd("recover_worker.py", ROUNDS, out, "--mark-at", 7, cue),
                 no_leftovers, timeout=240)
    for killer in killers:
        killer.join()
    assert len(killed) == 2, run.output[-3000:]
    assert run.code == 0, run.output[-6000:]
    for dc in ("dc1", "dc2"):
        assert f"[launch] server {dc} was killed by SIGKILL; replacing it" in run.output
    assert "the servers of dc1, dc2 were replaced in" in run.output, run.output[-4000:]
    want = uninterrupted(ROUNDS, 3)
    for rank in range(3):
        got = np.load(out / f"rank{rank}.npz")
        for key in SHAPES:
            np.testing.assert_array_equal(got[str(key)], want[key], err_msg=f"rank {rank}")


@pytest.mark.slow
def test_recover_a_killed_worker_under_diloco(no_leftovers):
    """diloco h = 2, 2 DCs x 2 workers: rank 3 SIGKILLs itself at inner step 12 (its
    6th synchronization), after key 0's delta left and before key 1's. The launcher
    restarts it; it resumes at its rank's last synchronization (its step counter at rounds x
    h, the DC's model as weights and base, a fresh inner optimizer), the round in flight
    takes exactly one push from its rank per key, and the run completes. Every worker ends
    with the same weights (not those of an uninterrupted run: the lost local steps are
    recomputed from another start), and the replica audit finds every DC's replica
    identical with every update counted once."""
    import json
    steps, out, stats = 40, no_leftovers / "out", no_leftovers / "stats.jsonl"
    out.mkdir()
    run = launch(["--dcs", 2, "--workers-per-dc", 2, "--worker-restarts", 1,
                  "--sync", "diloco:h=2", "--audit-every", 2, "--stats", stats],
                 worker_cmd("recover_worker.py", steps, out, "--kill", 3, 12,
                            "--pause", 0.1),    # steps long enough for heartbeats' digests
                 no_leftovers, timeout=240)
    assert run.code == 0, run.output[-6000:]
    assert "expected round" not in run.output      # no push of a round sent twice
    assert "worker dc1/1 was killed by SIGKILL; restarting it into its rank (1 of 1)" \
        in run.output
    # its lost process had sent key 0's 6th delta: the new one resumes after the 5th
    # synchronization (step 10) and sends only key 1's 6th
    assert "worker rank 3 rejoined: its lost process had pushed key 0 6 round(s), key 1 5 " \
        "round(s)" in run.output, run.output[-4000:]
    assert "[worker dc1/1] rank 3 starts after round 10" in run.output
    final = _final_weights(out)
    for rank, weights in enumerate(final[1:], start=1):
        for key in SHAPES:
            np.testing.assert_array_equal(weights[str(key)], final[0][str(key)],
                                          err_msg=f"rank {rank}")
    audits = [json.loads(line) for line in stats.read_text().splitlines()
              if '"replica_audit"' in line]
    assert audits and max(a["round"] for a in audits) > 6, run.output[-4000:]
    assert {a["round"] % 2 for a in audits} == {0}, audits
    assert all(not a["mismatches"] and not a["count_errors"] for a in audits), audits
    assert all(a["dcs"] == 2 for a in audits if a["keys"]), audits
