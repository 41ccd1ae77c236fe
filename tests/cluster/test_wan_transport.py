"""wan_transport: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_wan_transport.py."""

import pytest
from launching import needs_wan

ROUND_ELEMENTS = 1024 * 1024     # float32: rounds of 4 MB


@needs_wan
# both data planes, with rounds of 4 MB: before the chunks handed over were kept until their
# round was acknowledged (a detour re-sent only the last 8), more of such a round than that
# was often already in the kernel's socket buffers and the shaper's queue when the link
# dropped, and the round waited for timeout_s (2 runs of 3 on the Python path)
@pytest.mark.parametrize("dataplane", ["native", "python"])
def test_a_tree_link_dropped_to_zero_mid_run_is_routed_around_on_the_emulated_wan(tmp_path,
                                                                                   dataplane):
    """small (3 DCs, full mesh) at 20 Mbit/s with adapt: after a few rounds of 4 MB the link
    dc1-dc2 drops to 1 kbit/s both ways. The stuck chunks go around it through dc0, the
    scheduler re-plans without it, and every round's sums stay exact."""
    import json
    import sys
    import threading
    import time

    from launching import WORKERS
    from netstorm import launcher as launch
    from netstorm import wan as wanlib
    from netstorm.geoserver.config.cluster import ClusterConfig, DataCenter
    from netstorm.wan import load_topology
    topology = load_topology("small").scaled(0.5)
    stats = tmp_path / "stats.jsonl"
    log = tmp_path / "run.log"
    rounds = 8
    with wanlib.EmulatedWan(topology) as wan:
        config = ClusterConfig(
            scheduler_host=wan.dc_address("dc0"), scheduler_port=launch.free_port(),
            dcs=tuple(DataCenter(dc, wan.dc_address(dc), 0, 1) for dc in topology.dcs),
            policy="fapt", adapt=True, stall_s=2.0, timeout_s=120.0, stats=str(stats),
            dataplane=dataplane,
            links=topology.without_latency().links)
        result = {}
        command = [sys.executable, str(WORKERS / "fault_worker.py"), "loop", str(rounds),
                   str(ROUND_ELEMENTS)]
        with open(log, "w") as out:
            runner = threading.Thread(target=lambda: result.update(code=launch.run_cluster(
                config, command, wrap_dc=wan.exec_prefix, out=out)))
            runner.start()
            deadline = time.monotonic() + 240
            while "rank 0 round 2 ok" not in log.read_text():
                assert runner.is_alive() and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            wan.apply_rates({("dc1", "dc2"): 0.001, ("dc2", "dc1"): 0.001})
            runner.join(300)
    text = log.read_text()
    assert result.get("code") == 0, text[-4000:]
    assert text.count(f"finished {rounds} rounds") == 3
    assert "stalled" in text and "go around it via dc0" in text
    assert text.count(f"data plane: {dataplane}") == 3      # every server ran that path
    policies = [json.loads(l) for l in stats.read_text().splitlines()
                if '"event":"policy"' in l]
    assert policies[-1]["reason"] == "re-planned"
    for tree in policies[-1]["trees"]:
        assert {tree["parent"]["dc1"], tree["parent"]["dc2"]} != {"dc2", "dc1"}
        assert tree["parent"]["dc1"] != "dc2" and tree["parent"]["dc2"] != "dc1"
