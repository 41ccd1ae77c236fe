"""netstorm.bench.throughput (scripts/server_throughput.py): one server's aggregation
throughput, netstorm's and ps-lite's, in one real run on loopback."""

import pytest
from netstorm.bench.throughput import main


def test_bad_arguments_are_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--systems", "pslite,zeromq"])
    assert exc.value.code == 2 and "unknown systems ['zeromq']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--workers", "0"])
