"""worker_client: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_worker_client.py."""
import re
import pytest
from netstorm.geoserver.worker.client import KVStoreError, WorkerSettings


def test_small_requests_travel_in_batches_and_every_sum_stays_exact(no_leftovers):
    """2 DCs x 2 workers, 96 small keys and a large one (tests/workers/fused_worker.py):
    each worker's small requests went in BATCHes, several per BATCH, and its DC server's
    replies too."""
    import re

    from launching import launch, worker_cmd
    run = launch(["--dcs", 2, "--workers-per-dc", 2], worker_cmd("fused_worker.py"),
                 no_leftovers)
    assert run.code == 0, run.output[-5000:]
    for rank in range(4):
        assert f"worker {rank} all checks passed" in run.output, run.output[-5000:]
        fused, batches = map(int, re.search(rf"worker {rank}: (\d+) requests in (\d+) "
                                            rf"batches", run.output).groups())
        assert batches > 0 and fused >= 2 * batches, run.output[-3000:]
    assert len(re.findall(r"'fused': [1-9]", run.output)) == 2, run.output[-3000:]


@pytest.mark.parametrize("key_folder, cause", [
    ("gone", "the secret key folder .*gone does not exist"),
    ("theirs", "the scheduler at tcp://.* refused the handshake")])
def test_a_worker_that_cannot_join_leaves_one_line_for_the_launcher(tmp_path, key_folder,
                                                                     cause):
    """A missing secret key folder, or a handshake the scheduler refuses (keys of another
    cluster): a KVStoreError naming the cause, also in the reason file the launcher prints."""
    from netstorm.geoserver.config.exit_reasons import read_reason
    from netstorm.geoserver.config.keys import generate_cluster_keys
    from netstorm.geoserver.core.security import credentials_for
    from netstorm.geoserver.core.van import Van
    from netstorm.geoserver.worker.client import WorkerClient
    ours = generate_cluster_keys(["eu"], tmp_path / "ours")
    theirs = generate_cluster_keys(["eu"], tmp_path / "theirs")
    why = tmp_path / "why"
    sched = Van("sched", "127.0.0.1", 0, credentials=credentials_for(ours, ""))
    try:
        settings = WorkerSettings(sched.address, "eu", timeout_s=5, reason_file=str(why),
                                  key_file=str(tmp_path / key_folder / "dc-eu.key_secret"),
                                  scheduler_key=theirs.keys[""], run_dir=str(tmp_path))
        with pytest.raises(KVStoreError, match=cause):
            WorkerClient(settings)
    finally:
        sched.close()
    reason, caused_by_other = read_reason(str(why))
    assert re.match(f"KVStoreError: .*{cause}", reason) and not caused_by_other
    assert "\n" not in reason
