"""The compression types for pseudo-gradients (int8, topk2bit) on a live cluster: their
payloads cross the real WAN transport (multipath, relays) and the workers' pushes, and the
example still learns with every replica agreeing. Their unit tests (no sockets) are the
tests/unit/test_compression_*.py."""
import json
import re
import sys

import pytest
from launching import REPO, launch

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("params", [{"type": "int8", "scope": "all"},
                                    {"type": "topk2bit", "ratio": 0.05, "warmup_rounds": 10,
                                     "scope": "all"}], ids=["int8", "topk2bit"])
def test_pseudo_gradient_types_train_the_example_on_multi_root_trees(no_leftovers, params):
    run = launch(["--dcs", 3, "--policy", "fapt", "--compression", json.dumps(params)],
                 [sys.executable, str(REPO / "examples" / "train_gluon.py")], no_leftovers)
    assert run.code == 0, run.output[-4000:]
    assert "dropped CHUNK" not in run.output and "PayloadError" not in run.output
    summaries = [l for l in run.output.splitlines() if "summary rank=" in l]
    accuracies = {l.split("accuracy=")[1].split()[0] for l in summaries}
    assert len(summaries) == 3 and len(accuracies) == 1, summaries
    assert float(accuracies.pop()) >= 0.9
    pushes = [int(n) for n in re.findall(r"compressed pushes (\d+)", run.output)]
    encoded = [int(n) for n in re.findall(r"'encoded': (\d+)", run.output)]
    assert len(pushes) == len(encoded) == 3 and all(pushes) and all(encoded), run.output[-3000:]
