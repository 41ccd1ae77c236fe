"""bench --chaos, live on loopback (no emulated WAN, so no link-cut: there is no link to
cut; the emulated-WAN kinds are checked by hand, docs/recovery-chaos.md): a short run of
three DCs, fault-free then with a server and a worker SIGKILLed, completes and reports
goodput, time to recover and no lost or doubled update. It runs the outer-optimizer mode
(netstorm-diloco) where the cluster file accepts recovery under it, else fsa
(netstorm-fapt), saying which."""
import json
import os
import signal
import subprocess
import sys

import pytest
from launching import REPO, leftovers
from netstorm.bench.chaos_run import with_recovery
from netstorm.geoserver.config.cluster import ClusterConfig, DataCenter
from netstorm.geoserver.config.sync import SyncConfig

ITERS = 350         # steps (>= 21 s, see --straggler): a fault at 8 s and one at 16 s
TIMEOUT_S = 600         # generous: the machine is shared; a hang fails the test, named


def _system(tmp_path) -> str:
    diloco = ClusterConfig("127.0.0.1", 9000, (DataCenter("a", "127.0.0.1", 0, 1),), sync=(
        SyncConfig.from_params({"mode": "diloco", "h": 5}, where="test")))
    _, refused = with_recovery(diloco, 1, tmp_path / "c.npz")
    return "netstorm-fapt" if {"worker_restarts", "server_restarts"} & set(refused) \
        else "netstorm-diloco"


@pytest.mark.slow
def test_chaos_run_with_a_server_and_a_worker_killed_loses_nothing(no_leftovers):
    tmp = no_leftovers
    system = _system(tmp)
    print(f"chaos live test on {system}")
    argv = [sys.executable, str(REPO / "scripts" / "bench.py"), "--mode", "train",
            "--systems", system, "--topology", "small", "--workload", "mlp-digits",
            "--hidden", "32", "--iters", str(ITERS), "--eval-every", "100", "--h", "5",
            "--chaos", "server,worker", "--every", "8s", "--duration", "16s",
            "--straggler", "dc0=0.06",     # every step >= 60 ms
            "--chaos-seed", "5",          # dc2's server, then dc1/0 (see below)
            "--chaos-loopback", "--chaos-timeout", "120",
            "--keep-logs", str(tmp / "logs"), "--json", str(tmp / "chaos.json")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, TMPDIR=str(tmp)), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        for p in leftovers(str(tmp)):
            p.kill()
        pytest.fail(f"bench --chaos did not finish within {TIMEOUT_S}s:\n"
                    f"{proc.communicate()[0].decode()[-4000:]}")
    text = out.decode("utf-8", "replace")
    assert proc.returncode == 0, text[-5000:]
    result = json.loads((tmp / "chaos.json").read_text())
    # the server first, replaced in seconds, then a worker of another DC: one recovery at a
    # time (overlapping recoveries are the chaos run's to measure: docs/recovery-chaos.md)
    assert [(f["kind"], f["target"]) for f in result["schedule"]] == [("server", "dc2"),
                                                                      ("worker", "dc1/0")]
    assert sorted(f["kind"] for f in result["faults"]) == ["server", "worker"], text[-3000:]
    assert result["skipped"] == []
    assert set(result["by_kind"]) == {"server", "worker"}
    for figures in (result["fault_free"], result["chaos"]):
        assert figures["exit_code"] == 0 and figures["goodput"] > 0
        assert figures["useful_samples"] == ITERS * 3 * 32     # every step of 3 workers once
        assert figures["lost_or_doubled"]["total"] == 0
        assert figures["final_quality"] is not None
    assert 0 < result["goodput_ratio"]
    assert all(f["next_round_s"] is not None for f in result["faults"]), result["faults"]
    assert "was killed by SIGKILL; replacing it from a peer DC's replica" in text
    assert "was killed by SIGKILL; restarting it into its rank" in text
    assert "goodput:" in text and "lost or doubled updates: 0" in text
    lines = (tmp / "logs" / "chaos.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines].count("inject") == 2
