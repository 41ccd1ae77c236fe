"""bench_throughput: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_bench_throughput.py."""

from netstorm.bench.throughput import measure, table


def test_both_servers_aggregate_exactly_and_the_table_compares_them(tmp_path):
    results = measure(["pslite", "netstorm"], 2, "mobilenet0.25", 2, tmp_path)
    for name in ("pslite", "netstorm"):
        r = results[name]
        assert r["correct"] and r["exit_code"] == 0, r
        assert r["gb_per_s"] > 0 and r["cpu"]["steady_state"]
        assert r["cpu"]["server"]["processes"] == 1 and r["cpu"]["worker"]["processes"] == 2
    text = table(results, 2, "mobilenet0.25")
    assert "netstorm / pslite throughput:" in text and "CPU-s/GB" in text
