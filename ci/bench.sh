#!/usr/bin/env bash
# Benchmarks (not part of the test run): bash ci/bench.sh archive|spark [args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/bootstrap.sh
which=${1:-archive}; shift || true
exec .venv/bin/python -m "tests.benchmarks.bench_${which}" "$@"
