#!/usr/bin/env bash
# Set up .venv, then run the test suite. Extra arguments go to pytest:
#   bash scripts/test.sh -m unit      one process, no sockets (tests/unit/, under 2 minutes)
#   bash scripts/test.sh -m cluster   processes, sockets, namespaces (tests/cluster/)
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
cd "$REPO"
# Linux perf, for tests/cluster/test_bench_perf_profile.py (bench.py --perf): Debian's linux-perf
if ! command -v perf >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "[setup] installing Debian's linux-perf (bench.py --perf and its test)"
    apt-get install -y -q linux-perf >/dev/null 2>&1 || \
        (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q linux-perf >/dev/null 2>&1) || \
        echo "[setup] linux-perf could not be installed: its test will say so and skip"
fi
# clang with libFuzzer, for tests/cluster/test_dataplane_fuzz.py (the data plane's fuzzers):
# Debian's clang
if ! command -v clang++ >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "[setup] installing Debian's clang (libFuzzer for the data plane's fuzz test)"
    apt-get install -y -q clang >/dev/null 2>&1 || \
        (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q clang >/dev/null 2>&1) || \
        echo "[setup] clang could not be installed: the fuzz test will say so and skip"
fi
python -m pytest -q "$@"
