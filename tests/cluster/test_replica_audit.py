"""The replica audit, live (docs/recovery-audit.md): DC servers digest their replicas every
``--audit-every`` rounds and the scheduler compares them; the rest is in
tests/unit/test_replica_audit.py and tests/unit/test_replica_digest.py."""
import json
import re

import numpy as np
import pytest
from launching import launch, worker_cmd

from unit.test_recovery import _spec, _values, uninterrupted

_spec.loader.exec_module(_values)       # the worker scripts' own gradients

SHAPES, OPTIMIZER = _values.SHAPES, _values.OPTIMIZER
ROUNDS, EVERY = 30, 5


def _records(path) -> list:
    return [r for r in map(json.loads, path.read_text().splitlines())
            if r.get("event") == "replica_audit"]


@pytest.mark.slow
def test_replica_audit_of_an_uninterrupted_run_finds_nothing(no_leftovers):
    out, stats = no_leftovers / "out", no_leftovers / "stats.jsonl"
    out.mkdir()
    run = launch(["--dcs", 2, "--audit-every", EVERY, "--stats", stats],
                 worker_cmd("audit_worker.py", ROUNDS, out, "--pause", 0.05), no_leftovers)
    assert run.code == 0, run.output[-4000:]
    records = _records(stats)
    assert records, run.output[-4000:]
    assert {r["round"] % EVERY for r in records} == {0}
    assert all(r["mismatches"] == [] and r["count_errors"] == [] for r in records), records
    assert all(r["dcs"] == 2 for r in records if r["keys"])


@pytest.mark.slow
def test_replica_audit_stops_a_run_whose_dc_sets_another_learning_rate(no_leftovers):
    """dc1's worker sets lr 0.25 where dc0's sets 0.125: the replicas differ from round 1;
    the audit of round 5 stops the run naming both DCs (two: no majority) and the key."""
    out = no_leftovers / "out"
    out.mkdir()
    run = launch(["--dcs", 2, "--audit-every", EVERY],
                 worker_cmd("audit_worker.py", 10 * ROUNDS, out, "--odd-rank", 1, "--odd-lr",
                            2 * OPTIMIZER["learning_rate"], "--pause", 0.1), no_leftovers)
    assert run.code != 0, run.output[-4000:]
    found = re.search(r"replica audit: the replicas of key [01] after round (\d+) differ "
                      r"between dc0 \(SHA-256 \w+\.\.\., (\d+) updates\) and dc1", run.output)
    assert found, run.output[-4000:]
    assert int(found.group(1)) <= 3 * EVERY and found.group(1) == found.group(2)
    assert "no majority to copy from" in run.output
    assert not list(out.iterdir())          # nobody finished (300 rounds of at least
                                            # 0.1 s): the run was stopped


@pytest.mark.slow
def test_replica_audit_replaces_the_odd_replica_from_the_majority(no_leftovers):
    """3 DCs on multi-root trees, dc2's worker sets another learning rate, --server-restarts 1:
    the audit names
    dc2 against dc0 and dc1, dc2 copies every key (and the optimizer) from them, and the run
    ends with every worker holding the weights of a run where nobody diverged, bit for bit;
    the audits after the repair find nothing."""
    out, stats = no_leftovers / "out", no_leftovers / "stats.jsonl"
    out.mkdir()
    run = launch(["--dcs", 3, "--policy", "fapt", "--server-restarts", 1, "--audit-every",
                  EVERY, "--stats", stats],
                 worker_cmd("audit_worker.py", ROUNDS, out, "--odd-rank", 2, "--odd-lr",
                            2 * OPTIMIZER["learning_rate"], "--pause", 0.1),
                 no_leftovers, timeout=240)
    assert run.code == 0, run.output[-6000:]
    assert re.search(r"the replica of key [01] after round \d+ in dc2 \(SHA-256 \w+\.\.\., "
                     r"\d+ updates\) differs from the majority dc0, dc1", run.output), \
        run.output[-4000:]
    assert "the replica of dc2 was replaced from the majority's in" in run.output
    want = uninterrupted(ROUNDS, 3)
    for rank in range(3):
        got = np.load(out / f"rank{rank}.npz")
        for key in SHAPES:
            np.testing.assert_array_equal(got[str(key)], want[key], err_msg=f"rank {rank}")
    records = _records(stats)
    odd = [r for r in records if r["mismatches"]]
    assert odd and all(m["odd"] == ["dc2"] for r in odd for m in r["mismatches"])
    after = [r for r in records if r["round"] > odd[-1]["round"] and r["keys"]]
    assert after and not any(r["mismatches"] or r["count_errors"] for r in after)
