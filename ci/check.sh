#!/usr/bin/env bash
# Static checks that .ci/run makes before the tests: ruff (lint, format), import-linter contracts, mypy --strict.
# Usage: bash ci/check.sh [lint|format|imports|types]...   (no argument: all of them)
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/bootstrap.sh

run() {
    case "$1" in
        lint) .venv/bin/ruff check archive connector ;;
        format) .venv/bin/ruff format --check archive connector ;;
        imports) .venv/bin/lint-imports --no-cache ;;
        types) .venv/bin/mypy -p aeron_archive_spark.archive -p aeron_archive_spark.connector ;;
        *) echo "ci/check.sh: unknown check $1 (lint, format, imports, types)" >&2; return 2 ;;
    esac
}

checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(lint format imports types)
for check in "${checks[@]}"; do
    echo "ci/check.sh: $check" >&2
    run "$check"
done
