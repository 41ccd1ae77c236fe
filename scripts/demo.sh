#!/usr/bin/env bash
# Set up .venv, then train the example CNN on a pseudo-distributed 2-DC x 2-worker cluster.
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
cd "$REPO"
python scripts/launch.py --dcs 2 --workers-per-dc 2 -- python examples/train_gluon.py "$@"
