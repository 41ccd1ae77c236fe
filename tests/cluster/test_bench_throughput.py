"""netstorm.bench.throughput (scripts/server_throughput.py): one server's aggregation
throughput, netstorm's and ps-lite's, in one real run on loopback."""
import pytest

from netstorm.bench.throughput import main, measure, table


def test_both_servers_aggregate_exactly_and_the_table_compares_them(tmp_path):
    results = measure(["pslite", "netstorm"], 2, "mobilenet0.25", 2, tmp_path)
    for name in ("pslite", "netstorm"):
        r = results[name]
        assert r["correct"] and r["exit_code"] == 0, r
        assert r["gb_per_s"] > 0 and r["cpu"]["steady_state"]
        assert r["cpu"]["server"]["processes"] == 1 and r["cpu"]["worker"]["processes"] == 2
    text = table(results, 2, "mobilenet0.25")
    assert "netstorm / pslite throughput:" in text and "CPU-s/GB" in text


def test_bad_arguments_are_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--systems", "pslite,zeromq"])
    assert exc.value.code == 2 and "unknown systems ['zeromq']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--workers", "0"])
