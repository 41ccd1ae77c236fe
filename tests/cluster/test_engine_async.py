"""engine_async: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_engine_async.py."""

import subprocess
import sys
from unit.test_engine_async import NAIVE
from unit.test_engine_async import engine  # noqa: F401  (fixtures)



def test_under_the_naive_engine_a_push_waits_for_completion_and_raises_the_failure():
    done = subprocess.run([sys.executable, "-c", NAIVE], capture_output=True, text=True,
                          timeout=120, env={**__import__("os").environ,
                                            "MXNET_ENGINE_TYPE": "NaiveEngine"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["raised", "at", "the", "push", "completed"]
