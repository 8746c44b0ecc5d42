#!/usr/bin/env bash
# The multi-host test topology (issue 10): hosts made of Linux namespaces with an archive, a live publisher and a
# Spark standalone cluster. Needs root. The logic is tests/cluster/topology.py; see docs/cluster.md.
# Usage: bash ci/cluster.sh up [--publisher-rate N] | down | status | run HOST [CMD...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash ci/bootstrap.sh >&2
exec .venv/bin/python -m tests.cluster.topology "$@"
