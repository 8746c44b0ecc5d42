#!/usr/bin/env bash
# The project's test command: bootstrap .venv, then run the default (non-slow) test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/bootstrap.sh
exec .venv/bin/python -m pytest "$@"
