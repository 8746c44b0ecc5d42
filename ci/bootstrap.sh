#!/usr/bin/env bash
# Create .venv with a Python >= 3.12 and install the project (editable) with its test extras.
# Idempotent: re-running only re-installs when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
    local candidates=()
    [ -n "${PYTHON:-}" ] && candidates+=("$PYTHON")
    candidates+=(python3.14 python3.13 python3.12 python3)
    if command -v pyenv >/dev/null 2>&1; then
        local root; root=$(pyenv root)
        for d in $(ls -d "$root"/versions/3.1[2-9]* 2>/dev/null | sort -V -r); do candidates+=("$d/bin/python3"); done
    fi
    for d in $(ls -d "$HOME"/.pyenv/versions/3.1[2-9]* /usr/local/bin/python3.1[2-9] 2>/dev/null | sort -V -r); do
        [ -x "$d" ] && candidates+=("$d") || candidates+=("$d/bin/python3")
    done
    for c in "${candidates[@]}"; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            command -v "$c"; return 0
        fi
    done
    return 1
}

# A .venv without pip is one whose creation was cut off (ensurepip runs last): made again, not installed into.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null \
        || ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
    PY=$(find_python) || { echo "bootstrap: no Python >= 3.12 found (set PYTHON=/path/to/python3.12)" >&2; exit 1; }
    echo "bootstrap: creating .venv with $PY ($("$PY" --version))" >&2
    rm -rf .venv
    "$PY" -m venv .venv
fi

stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
    echo "bootstrap: installing the project and its dependencies into .venv" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
    .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
    .venv/bin/python -c 'import aeron_archive_spark.archive, aeron_archive_spark.connector, pyaeron, pyspark, pyarrow, numpy, cffi, crc32c, pyspark_aeron_archive' \
        || { echo "bootstrap: installation failed" >&2; exit 1; }
    # Spark finds `pyspark_*` modules with pkgutil.iter_modules(), which does not see setuptools' editable
    # finder; a path entry for the shim's directory makes the editable install auto-register too.
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$(pwd)/connector/autoregister" > "$site/aeron_archive_spark_autoregister.pth"
    rm -f .venv/.installed-*
    touch "$stamp"
fi
if ! command -v java >/dev/null 2>&1; then
    echo "bootstrap: warning: no java on PATH; Spark needs Java 17+" >&2
fi
