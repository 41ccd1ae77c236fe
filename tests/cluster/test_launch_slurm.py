"""launch --slurm under a real Slurm (tests/slurm_cluster.py: munged, slurmctld and two
slurmd on this host, nodes netstorm1 at 127.0.0.1 and netstorm2 at 127.0.0.2): one
``sbatch --wait`` of the heterogeneous-job example trains two DCs, one per component, each
node's share started by srun. Skipped, naming the packages, where Slurm is not installed."""

import os
import sys
from pathlib import Path

import pytest
from launching import REPO, leftovers, worker_cmd
from slurm_cluster import SlurmCluster, unavailable

ROUNDS = 5


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.close()


@pytest.mark.system_package("slurm-wlm", "munge")
def test_one_sbatch_trains_two_dcs_in_a_heterogeneous_job(slurm, tmp_path):
    """examples/slurm/two_dcs_hetjob.sbatch, one worker per DC: the job succeeds, each DC
    runs on its component's node (dc1's server at netstorm2's address), every worker checks
    every round's sum over all workers (the same values everywhere) and finishes, and no
    process of the job is left."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {"PATH": path, "TMPDIR": str(tmp_path), "WORKERS_PER_DC": "1",
           "TRAIN": " ".join(worker_cmd("fault_worker.py", "loop", ROUNDS))}
    run = slurm.sbatch_wait(REPO / "examples" / "slurm" / "two_dcs_hetjob.sbatch", env,
                            cwd=REPO, timeout=90)
    assert run.code == 0, run.output[-4000:]
    assert "[launch] slurm heterogeneous job" in run.output, run.output[-4000:]
    assert "[launch] netstorm1 (127.0.0.1): scheduler, server dc0, worker dc0/0" in run.output
    assert "[launch] netstorm2 (127.0.0.2): server dc1, worker dc1/0" in run.output
    assert "server of dc1 is node" in run.output and "at tcp://127.0.0.2:" in run.output
    for host, dc, rank in (("netstorm1", "dc0", 0), ("netstorm2", "dc1", 1)):
        assert f"[host {host}] [worker {dc}/0] rank {rank} finished {ROUNDS} rounds" \
            in run.output, run.output[-4000:]
    assert "[launch] ok: 2 node(s), 2 DC(s), 2 worker(s)" in run.output
    assert not slurm.jobs()
    alive = leftovers(str(tmp_path))
    for proc in alive:
        proc.kill()
    assert not alive, [p.info["cmdline"] for p in alive]
