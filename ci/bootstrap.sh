#!/usr/bin/env bash
# Create .venv with a Python >= 3.12 and install the project (editable, strict mode) with its test extras.
# Idempotent: re-running only re-installs when pyproject.toml changed, and re-links when the package's files did.
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

# The project is installed in setuptools' strict editable mode: a tree of links under build/ with the installed
# layout (archive/ -> aeron_archive_spark/archive, ...), on sys.path through a plain .pth. Every tool that reads
# installed packages (mypy, pyright, IDEs, pkgutil, which Spark uses to find the pyspark_* shim) resolves it, which
# the default mode's import hook did not allow. The tree links files one by one, so it is made again when the
# package's files change (a new module), as well as when pyproject.toml does.
files_hash() { { sha1sum pyproject.toml; find archive connector -name '*.py' -o -name '*.xml' -o -name py.typed | sort; } | sha1sum | cut -c1-12; }
link_project() {  # [pip options...] [requirement]: the project's link tree (and, given ".[test]", its dependencies)
    local out
    if ! out=$(.venv/bin/python -m pip install -q --disable-pip-version-check --config-settings editable_mode=strict \
            "$@" 2>&1); then
        echo "$out" >&2; echo "bootstrap: installing the project into .venv failed" >&2; exit 1
    fi
}
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
    echo "bootstrap: installing the project and its dependencies into .venv" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
    rm -f "$site/aeron_archive_spark_autoregister.pth"  # the link tree holds the shim now
    link_project -e ".[test]"
    .venv/bin/python -c 'import aeron_archive_spark.archive, aeron_archive_spark.connector, pyaeron, pyspark, pyarrow, numpy, cffi, crc32c, pyspark_aeron_archive' \
        || { echo "bootstrap: installation failed" >&2; exit 1; }
    rm -f .venv/.installed-* .venv/.linked-*
    touch "$stamp"
fi
linked=.venv/.linked-$(files_hash)
if [ ! -f "$linked" ]; then
    link_project --no-deps -e .
    rm -f .venv/.linked-*
    touch "$linked"
fi
if ! command -v java >/dev/null 2>&1; then
    echo "bootstrap: warning: no java on PATH; Spark needs Java 17+" >&2
fi
# The cluster suite (root only: namespaces) drops new inbound UDP on hosts with nftables (issue 36's firewall test):
# Debian's nftables package, installed here once where apt can.
if [ "$(id -u)" = 0 ] && ! command -v nft >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing nftables for the cluster suite's firewall test" >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables >/dev/null 2>&1; then
        apt-get update -q >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables >/dev/null 2>&1 \
            || echo "bootstrap: warning: could not install nftables; the cluster firewall test will fail" >&2
    fi
fi
