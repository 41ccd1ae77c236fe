#!/usr/bin/env bash
# Set up .venv, then run the test suite. Extra arguments go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
cd "$REPO"
python -m pytest -q "$@"
