"""netstorm.bench.wan_throughput (scripts/server_throughput.py --wan-dcs): the cluster file
each run uses, the figures' arithmetic, the table, and the flags; the run itself is in
tests/cluster/test_bench_wan_throughput.py."""

import pytest
from netstorm.bench.throughput import main
from netstorm.bench.wan_throughput import ServerCpu, cluster_table, interpolate, run_order, \
    server_figures, shutdown_sent, summarize, table_wan
from netstorm.geoserver.config.cluster import parse_cluster
from netstorm.geoserver.config.cluster_toml import to_toml


def test_the_dataplanes_alternate_their_order_from_one_repetition_to_the_next():
    assert run_order(["python", "native"], 3) == [
        (0, "python"), (0, "native"), (1, "native"), (1, "python"), (2, "python"),
        (2, "native")]
    assert run_order(["native"], 2) == [(0, "native"), (1, "native")]


@pytest.mark.parametrize("dataplane", ["python", "native"])
@pytest.mark.parametrize("curve", [True, False])
def test_each_run_is_a_valid_fapt_cluster_file_on_its_dataplane(dataplane, curve):
    table = cluster_table(3, dataplane, curve, 9000)
    assert table["transport"]["dataplane"] == dataplane
    config = parse_cluster(table, source="<test>")
    assert config.dataplane == dataplane and config.security.curve is curve
    assert config.policy == "fapt" and config.trees == "shared" and not config.adapt
    assert [(d.name, d.workers, d.server_port) for d in config.dcs] == \
        [("dc0", 1, 0), ("dc1", 1, 0), ("dc2", 1, 0)]
    # a full mesh of equal links: the planner needs no start-up measurement
    assert {(link.a, link.b) for link in config.links} == \
        {("dc0", "dc1"), ("dc0", "dc2"), ("dc1", "dc2")}
    assert len({(link.mbps_ab, link.mbps_ba) for link in config.links}) == 1
    # what the launcher hands its processes says the same
    assert f'dataplane = "{dataplane}"' in to_toml(config)


def test_each_servers_sent_bytes_come_from_its_shutdown_line():
    log = (
        "[server dc1] 18:27:55.672 INFO netstorm.server: dc1: shutdown requested; "
        "{'messages': 846, 'dropped': 0, 'fused': 298}; WAN chunks sent {'chunks': 344, "
        "'encoded': 0, 'bytes': 7521152}, 85 of them in BATCHes; compressed pushes 0\n"
        "[worker dc0/0] WAN chunks sent {'bytes': 1}\n"              # not a server's
        "[server dc0] 18:27:55.671 INFO netstorm.server: dc0: shutdown requested; {}; WAN "
        "chunks sent {'chunks': 2, 'encoded': 0, 'bytes': 40}, 0 of them in BATCHes\n")
    assert shutdown_sent(log) == {"dc1": 7521152, "dc0": 40}
    assert shutdown_sent("[server dc0] started\n") == {}


def test_interpolation_is_linear_between_samples_and_clamped_outside():
    times, values = [0.0, 1.0, 3.0], [0.0, 2.0, 3.0]
    assert interpolate(times, values, 0.25) == 0.5
    assert interpolate(times, values, 2.0) == 2.5
    assert interpolate(times, values, 1.0) == 2.0
    assert interpolate(times, values, -1.0) == 0.0 and interpolate(times, values, 9.0) == 3.0


def test_cpu_seconds_per_gb_and_gb_per_second():
    wan = server_figures(0.5, 2e9, 4.0)
    assert wan == {"cpu_s": 0.5, "wan_bytes": 2_000_000_000, "cpu_s_per_wan_gb": 0.25,
                   "wan_gb_per_s": 0.5}
    local = server_figures(3.0, 1.5e9, 0.5, wan=False)
    assert local["cpu_s_per_gb"] == 2.0 and local["gb_per_s"] == 3.0 and \
        local["bytes"] == 1_500_000_000
    assert server_figures(1.0, 0, 0.0)["cpu_s_per_wan_gb"] is None


def test_less_cpu_than_one_clock_tick_gives_no_cpu_per_gb_and_the_summary_says_so():
    short = server_figures(0.004, 2e7, 0.03, wan=False)
    assert short["cpu_s_per_gb"] is None and short["gb_per_s"] == pytest.approx(0.6667, abs=1e-4)
    assert server_figures(0.01, 2e7, 0.03, wan=False)["cpu_s_per_gb"] == 0.5
    runs = [_run(0, "python", None, 0.5, None), _run(1, "python", 4.0, 0.5, None)]
    s = summarize(runs)
    assert s["python"]["cpu_s_per_wan_gb"] == 4.0 and s["pslite"]["cpu_s_per_gb"] is None
    assert "median ps-lite server: not measurable (too few --iters)" in table_wan(
        runs, 2, "resnet18_v1", 3)


def test_each_servers_cpu_is_interpolated_to_the_measured_window():
    cpu = ServerCpu()
    cpu.per_server = [(0.0, {}), (1.0, {"dc0": 1.0, "dc1": 4.0}), (2.0, {"dc0": 3.0, "dc1": 4.0}),
                      (3.0, {"dc0": 3.5, "dc1": 5.0})]
    used = cpu.between(1.5, 2.5)
    assert used == pytest.approx({"dc0": 1.25, "dc1": 0.5})
    assert cpu.between(0.0, 1.0) == pytest.approx({"dc0": 1.0, "dc1": 4.0})  # before: none


def _run(k, dataplane, per_gb, rate, pslite_per_gb=1.0):
    server = {"cpu_s": 0.2, "wan_sent_bytes": 5 * 10 ** 7, "wan_bytes": 10 ** 8,
              "cpu_s_per_wan_gb": per_gb, "wan_gb_per_s": rate}
    return {"repetition": k, "dataplane": dataplane, "dcs": 2, "correct": True,
            "tree_bytes_ratio": 1.0, "policy": "fapt: 1 trees (dc0 100%)",
            "servers": {"dc0": server, "dc1": server},
            "all_servers": {**server, "cpu_s": 0.4, "wan_bytes": 2 * 10 ** 8},
            "pslite": {"correct": True, "cpu_s": 0.1, "bytes": 10 ** 8,
                       "cpu_s_per_gb": pslite_per_gb, "gb_per_s": 2.0}}


def test_the_summary_takes_medians_per_dataplane_and_the_table_shows_every_server():
    runs = [_run(0, "python", 4.0, 0.5, 1.0), _run(0, "native", 2.0, 1.0, 1.0),
            _run(1, "native", 3.0, 0.8, 3.0), _run(1, "python", 6.0, 0.3, 3.0),
            _run(2, "python", 5.0, 0.4, 2.0),
            {"repetition": 2, "dataplane": "native", "correct": False, "error": "exit 1",
             "pslite": _run(2, "x", 0, 0, 2.0)["pslite"]}]
    s = summarize(runs)
    assert s["python"] == {"runs": 3, "cpu_s_per_wan_gb": 5.0, "wan_gb_per_s_per_server": 0.4}
    assert s["native"] == {"runs": 2, "cpu_s_per_wan_gb": 2.5, "wan_gb_per_s_per_server": 0.9}
    assert s["pslite"] == {"runs": 3, "cpu_s_per_gb": 2.0, "gb_per_s": 2.0}
    text = table_wan(runs, 2, "resnet18_v1", 10)
    assert text.count("ps-lite          server") == 3          # once per repetition
    assert text.count("netstorm python  dc1") == 3 and "FAILED: exit 1" in text
    assert "median netstorm native: 2.50 CPU-s per WAN GB" in text
    assert "median ps-lite server: 2.00 CPU-s/GB" in text


@pytest.mark.parametrize("argv, message", [
    (["--wan-dcs", "1"], "--wan-dcs must be >= 2"),
    (["--wan-dcs", "2", "--dataplanes", "python,rust"], "--dataplanes: unknown ['rust']"),
    (["--wan-dcs", "2", "--workers", "3"], "--workers: not with --wan-dcs"),
    (["--wan-dcs", "2", "--perf"], "--perf: not with --wan-dcs"),
    (["--wan-dcs", "2", "--repeat", "0"], "--repeat must be >= 1"),
    (["--repeat", "2"], "--repeat needs --wan-dcs"),
    (["--dataplanes", "python"], "--dataplanes needs --wan-dcs"),
    (["--no-curve"], "--no-curve needs --wan-dcs"),
])
def test_wan_flags_that_do_not_fit_are_refused_naming_the_flag(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_run_without_every_servers_wan_bytes_has_no_figures_and_says_why():
    from pathlib import Path

    from netstorm.bench.wan_throughput import _wan_problem
    ok, window, log = {"correct": True}, (3, 0.0, 1.0), Path("run.log")
    assert _wan_problem(0, ok, window, [], {"dc0": 8, "dc1": 8}, "python", log) is None
    assert _wan_problem(1, ok, window, [], {}, "python", log) == ""     # its log says why
    assert "no shutdown line of ['dc1']" in _wan_problem(0, ok, window, ["dc1"], {"dc0": 8},
                                                         "python", log)
    assert "sent no WAN bytes (dataplane native)" in _wan_problem(
        0, ok, window, [], {"dc0": 0, "dc1": 0}, "native", log)
