"""bench_wan_throughput: ``scripts/server_throughput.py --wan-dcs 2`` for real (processes and
sockets); the arithmetic, the cluster file and the flags are in
tests/unit/test_bench_wan_throughput.py."""

import json

from netstorm.bench.throughput import main


def test_two_dc_servers_report_cpu_per_wan_gb_beside_pslites_server(tmp_path, capsys):
    out = tmp_path / "wan.json"
    code = main(["--wan-dcs", "2", "--model", "mobilenet0.25", "--iters", "20",
                 "--dataplanes", "python", "--json", str(out),
                 "--keep-logs", str(tmp_path / "logs")])
    assert code == 0, capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["mode"] == "wan" and result["curve"] and result["dataplanes"] == ["python"]
    (run,) = result["runs"]
    assert run["correct"] and run["dataplane"] == "python" and run["dcs"] == 2
    assert run["policy"].startswith("fapt") and run["tree_bytes_ratio"] == 1.0
    assert set(run["servers"]) == {"dc0", "dc1"}
    for server in [*run["servers"].values(), run["all_servers"]]:
        assert server["cpu_s"] > 0 and server["wan_bytes"] > 0
        assert server["cpu_s_per_wan_gb"] > 0 and server["wan_gb_per_s"] > 0
    # 2 DCs share one tree edge: each server sends (and receives) the model once a round
    assert run["servers"]["dc0"]["wan_sent_bytes"] == 20 * run["model_bytes"]
    pslite = run["pslite"]
    assert pslite["correct"] and pslite["bytes"] == 2 * 2 * 20 * run["model_bytes"]
    assert pslite["cpu_s_per_gb"] > 0 and pslite["gb_per_s"] > 0
    assert result["summary"]["python"]["runs"] == 1 and result["summary"]["pslite"]["runs"] == 1
    text = capsys.readouterr().out
    assert "netstorm python  dc1" in text and "median ps-lite server" in text
