#!/usr/bin/env bash
# Benchmarks (not part of the test run): bash ci/bench.sh archive|archive-external|spark_source|spark_sink|live-tail|cluster|replication|replicas|time-index-copy|sbe-groups|many-recordings|trigger-listing|udp-hop|replay-mtu [args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/bootstrap.sh
which=${1:-archive}; shift || true
which=${which//-/_}  # sbe-groups -> bench_sbe_groups
exec .venv/bin/python -m "tests.benchmarks.bench_${which}" "$@"
