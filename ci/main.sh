#!/usr/bin/env bash
# The main job: the end-to-end demo on the embedded default (embedded media driver, local archive dir, local Spark).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/bootstrap.sh
exec .venv/bin/python examples/demo.py "$@"
