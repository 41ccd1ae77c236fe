"""The compression types for pseudo-gradients (int8, topk2bit) on a live cluster: their
payloads cross the real WAN transport (multipath, relays) and the workers' pushes, and the
example still learns with every replica agreeing. Their unit tests (no sockets) are the
tests/unit/test_compression_*.py."""
import pytest
from launching import train_example_compressed

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("params", [{"type": "int8", "scope": "all"},
                                    {"type": "topk2bit", "ratio": 0.05, "warmup_rounds": 10,
                                     "scope": "all"}], ids=["int8", "topk2bit"])
def test_pseudo_gradient_types_train_the_example_on_multi_root_trees(no_leftovers, params):
    run = train_example_compressed(no_leftovers, params)
    assert "dropped CHUNK" not in run.output and "PayloadError" not in run.output
