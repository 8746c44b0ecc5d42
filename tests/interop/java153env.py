"""The real Java Aeron 1.53 (a local build) for interop tests: find it, compile the test programs, run them bounded,
and run Java's ArchivingMediaDriver and our `aeron-archive serve` as processes.

The build comes from `/work/shared/java-aeron/build.sh` (see its README); CI does not build it. Its folder is read
only from the environment variable `JAVA_AERON_HOME` (its `env.sh` exports it): when that is unset, or the folder
has no `env.sh`, `Java153Env.get()` raises `Java153Unavailable` and the tests skip with the reason. Nothing of the
build is copied into the repository: the programs under `tests/interop/java153/` are compiled against its class
path (`AERON_CP` from `env.sh`) once per content hash into `.venv/java153/classes-<hash>`.

`JavaArchive` runs `start-archive.sh` (Java's ArchivingMediaDriver: a Java media driver and Aeron Archive 1.53) on
free ports, with its own Aeron directory under /dev/shm and its own archive directory; `OurArchive` runs
`aeron-archive serve` (embedded C media driver) the same way. Both are stopped with SIGTERM, then killed if slow.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from interop.javaenv import JavaResult  # what a bounded Java run gave, for both Java versions

ROOT = Path(__file__).resolve().parents[2]
JAVA_SRC = Path(__file__).resolve().parent / "java153"
CACHE = ROOT / ".venv" / "java153"
HOME_VARIABLE = "JAVA_AERON_HOME"


class Java153Unavailable(Exception):
    """Java Aeron 1.53 cannot be run here; the message says why."""


_lock = threading.Lock()
_cached: Java153Env | Java153Unavailable | None = None


@dataclass(frozen=True)
class Java153Env:
    home: Path
    java: str
    classpath_aeron: str
    jvm_options: tuple[str, ...]
    classes: Path

    @property
    def classpath(self) -> str:
        return f"{self.classes}{os.pathsep}{self.classpath_aeron}"

    @staticmethod
    def get() -> Java153Env:
        global _cached
        with _lock:
            if _cached is None:
                try:
                    _cached = _prepare()
                except Java153Unavailable as ex:
                    _cached = ex
            if isinstance(_cached, Java153Unavailable):
                raise _cached
            return _cached

    def command(self, main_class: str, *args: object) -> list[str]:
        return [self.java, *self.jvm_options, "-cp", self.classpath, main_class, *map(str, args)]

    def run(self, main_class: str, *args: object, timeout: float = 60.0, check: bool = True) -> JavaResult:
        """Run a test program to completion (killed after `timeout` s); `check` fails on a non-zero exit."""
        return _run(self.command(main_class, *args), main_class, timeout, check)

    def archive_tool(self, archive_dir: Path, *args: str, timeout: float = 60.0) -> JavaResult:
        """Java's io.aeron.archive.ArchiveTool on `archive_dir` (never fails on its exit code: that is the answer)."""
        cmd = [self.java, *self.jvm_options, "-cp", self.classpath_aeron, "io.aeron.archive.ArchiveTool",
               str(archive_dir), *args]
        return _run(cmd, "ArchiveTool", timeout, check=False)


def _run(cmd: list[str], what: str, timeout: float, check: bool) -> JavaResult:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as ex:
        out = ex.stdout.decode() if isinstance(ex.stdout, bytes) else (ex.stdout or "")
        err = ex.stderr.decode() if isinstance(ex.stderr, bytes) else (ex.stderr or "")
        raise AssertionError(f"{what} did not finish within {timeout}s\n--- stdout ---\n{out[-4000:]}\n"
                             f"--- stderr ---\n{err[-4000:]}") from None
    result = JavaResult(proc.stdout, proc.stderr, proc.returncode)
    if check and proc.returncode != 0:
        raise AssertionError(f"{what} exited with {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}"
                             f"\n--- stderr ---\n{proc.stderr[-4000:]}")
    return result


def _prepare() -> Java153Env:
    value = os.environ.get(HOME_VARIABLE, "")
    if not value:
        raise Java153Unavailable(f"{HOME_VARIABLE} is not set (build Java Aeron 1.53 with "
                                 "/work/shared/java-aeron/build.sh and export its folder)")
    home = Path(value)
    if not (home / "env.sh").is_file():
        raise Java153Unavailable(f"{HOME_VARIABLE}={home} has no env.sh (not a Java Aeron build folder)")
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        raise Java153Unavailable("java/javac not found on PATH (a JDK 17+ is needed)")
    try:
        proc = subprocess.run(
            ["bash", "-c", '. "$1/env.sh" && printf "%s\\n%s\\n" "$AERON_CP" "$AERON_JVM_OPTS"', "env", str(home)],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as ex:
        raise Java153Unavailable(f"sourcing {home}/env.sh failed: {ex}") from None
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) < 2 or not lines[0]:
        raise Java153Unavailable(f"{home}/env.sh gave no AERON_CP: {proc.stderr.strip()[-500:]}")
    classpath, options = lines[0], tuple(shlex.split(lines[1]))
    missing = [p for p in classpath.split(os.pathsep) if p and not Path(p).exists()]
    if missing:
        raise Java153Unavailable(f"AERON_CP of {home}/env.sh names missing paths: {missing}")
    return Java153Env(home, java, classpath, options, _compile(javac, home, classpath))


def _compile(javac: str, home: Path, classpath: str) -> Path:
    sources = sorted(JAVA_SRC.rglob("*.java"))
    digest = hashlib.sha256()
    version = subprocess.run([javac, "-version"], capture_output=True, text=True, timeout=60)
    digest.update((version.stdout + version.stderr).encode())
    digest.update(classpath.encode())
    info = home / "BUILD-INFO"
    if info.is_file():
        digest.update(info.read_bytes())
    for src in sources:
        digest.update(str(src.relative_to(JAVA_SRC)).encode() + b"\0" + src.read_bytes() + b"\0")
    target = CACHE / f"classes-{digest.hexdigest()[:16]}"
    if (target / ".complete").is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="classes-tmp-", dir=CACHE))
    try:
        proc = subprocess.run(
            [javac, "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", str(tmp), *map(str, sources)],
            capture_output=True, text=True, timeout=180)
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


def shm_dir(prefix: str) -> Path:
    """A fresh path for an Aeron directory: under /dev/shm when it is there, as Aeron's default is on Linux."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return base / f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def udp(port: int) -> str:
    return f"aeron:udp?endpoint=localhost:{port}"


@dataclass
class _Process:
    """A server process, stopped with SIGTERM (then SIGKILL); its output goes to files for the failure report."""

    name: str
    log_dir: Path
    proc: subprocess.Popen[str] | None = None
    _out: IO[str] | None = field(default=None, repr=False)
    _err: IO[str] | None = field(default=None, repr=False)

    def _start(self, cmd: list[str], env: dict[str, str] | None = None, stdout_pipe: bool = False) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._err = open(self.log_dir / f"{self.name}.err", "w")  # noqa: SIM115 - closed in stop()
        if not stdout_pipe:
            self._out = open(self.log_dir / f"{self.name}.out", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE if stdout_pipe else self._out, stderr=self._err,
                                     text=True, env=env, start_new_session=True)

    def logs(self) -> str:
        text = []
        for suffix in ("out", "err"):
            path = self.log_dir / f"{self.name}.{suffix}"
            if path.is_file():
                text.append(f"--- {path.name} ---\n{path.read_text()[-4000:]}")
        return "\n".join(text)

    def stop(self, timeout: float = 20.0) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        for f in (self._out, self._err):
            if f is not None:
                f.close()
        return proc.returncode


@dataclass
class JavaArchive(_Process):
    """Java 1.53's ArchivingMediaDriver (start-archive.sh) on its own Aeron dir, archive dir and control port."""

    env: Java153Env | None = None
    archive_dir: Path = Path()
    aeron_dir: Path = Path()
    control_port: int = 0
    properties: tuple[str, ...] = ()

    @property
    def control_channel(self) -> str:
        return udp(self.control_port)

    def start(self, timeout: float = 30.0) -> JavaArchive:
        assert self.env is not None
        cmd = ["bash", str(self.env.home / "start-archive.sh"), str(self.aeron_dir), str(self.archive_dir),
               f"-Daeron.archive.control.channel={self.control_channel}", *self.properties]
        self._start(cmd)
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        # The mark file is written once the archive's context is concluded, after its media driver is up; the
        # clients' own connect timeouts cover the few milliseconds until the conductor subscribes.
        while not ((self.archive_dir / "archive-mark.dat").is_file() and (self.aeron_dir / "cnc.dat").is_file()):
            if self.proc.poll() is not None:
                raise AssertionError(f"Java archive exited with {self.proc.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"Java archive not ready within {timeout}s\n{self.logs()}")
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = 20.0) -> int | None:
        try:
            return super().stop(timeout)
        finally:
            shutil.rmtree(self.aeron_dir, ignore_errors=True)  # deleted on shutdown, unless it was killed


def start_java_archive(env: Java153Env, base: Path, control_port: int, *properties: str) -> JavaArchive:
    base.mkdir(parents=True, exist_ok=True)
    archive = JavaArchive(name="java-archive", log_dir=base, env=env, archive_dir=base / "archive",
                          aeron_dir=shm_dir("j153-aeron"), control_port=control_port, properties=properties)
    return archive.start()


@dataclass
class OurArchive(_Process):
    """`aeron-archive serve` (embedded C media driver) on `archive_dir`; `ready` is the JSON line it printed.

    Run as `python -m aeron_archive_spark.archive.cli.main` with this interpreter, so it imports what the tests do
    (PYTHONPATH included)."""

    archive_dir: Path = Path()
    control_port: int = 0
    args: tuple[str, ...] = ()
    ready: dict[str, Any] = field(default_factory=dict)

    @property
    def control_channel(self) -> str:
        return udp(self.control_port)

    @property
    def aeron_dir(self) -> str:
        return str(self.ready["aeronDir"])

    def start(self, timeout: float = 60.0) -> OurArchive:
        cmd = [sys.executable, "-m", "aeron_archive_spark.archive.cli.main", "serve", "--dir", str(self.archive_dir),
               "--control-channel", self.control_channel, *self.args]
        self._start(cmd, stdout_pipe=True)
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline() if proc.stdout else ""),
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        if not lines or not lines[0].startswith("{"):
            self.stop()
            raise AssertionError(f"aeron-archive serve not ready within {timeout}s: {lines}\n{self.logs()}")
        self.ready = json.loads(lines[0])
        return self


def start_our_archive(base: Path, archive_dir: Path, control_port: int, *args: str) -> OurArchive:
    return OurArchive(name="our-archive", log_dir=base, archive_dir=archive_dir, control_port=control_port,
                      args=args).start()


def aeron_archive_cli(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """An offline `aeron-archive` verb, run with this interpreter (so with the tests' imports)."""
    return subprocess.run([sys.executable, "-m", "aeron_archive_spark.archive.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
