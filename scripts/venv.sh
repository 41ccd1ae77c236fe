# Sourced by scripts/demo.sh and scripts/test.sh: create .venv and install netstorm into it.
# Re-running is cheap: the install is skipped while setup.cfg is unchanged.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
PYTHON_BIN="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV with $($PYTHON_BIN --version 2>&1)"
    "$PYTHON_BIN" -m venv "$VENV"
fi
STAMP="$VENV/.netstorm-installed"
# the compiled data plane is rebuilt when its sources change (an editable install does not)
WANT="$(sha256sum "$REPO/setup.cfg" "$REPO/pyproject.toml" "$REPO/setup.py" \
    "$REPO"/geoserver/native/* | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    echo "[setup] installing netstorm and its dependencies into .venv"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$REPO[test]"
    # netstorm.torch's tests: a CPU build (a plain `torch` requirement would fetch CUDA)
    "$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
    echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
unset DMLC_ROLE DMLC_PS_ROOT_URI DMLC_PS_ROOT_PORT DMLC_NUM_SERVER DMLC_NUM_WORKER || true
