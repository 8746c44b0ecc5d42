"""A packed Python environment holding this project, for Spark's `spark.archives` (tests/cluster/test_packed_env.py).

Spark documents shipping Python dependencies to executors as a packed virtual environment
(https://spark.apache.org/docs/latest/api/python/user_guide/python_packaging.html):

    venv-pack -o env.tar.gz
    spark.archives=env.tar.gz#environment,  PYSPARK_PYTHON=./environment/bin/python

`packed_env()` builds that archive: a fresh venv from the interpreter the project's .venv was made from, holding a
wheel of this project (`pip wheel --no-deps` of a copy of the sources, so the repository gets no build/ directory)
and its runtime dependencies at the versions the .venv has, except pyspark (executors take pyspark from
$SPARK_HOME/python/lib/pyspark.zip). It is packed with venv-pack (installed into a tool venv of its own) or, if
venv-pack cannot be installed, with tarfile. Like any venv, the packed one runs where its base interpreter is at
the same path: bin/python links to it (here the root filesystem, and so the interpreter, is the same on every
host).

The archive is cached under $AAS_PACKED_ENV_CACHE (default /var/tmp/aas-packed-env, outside the topology's run
directory, which the hosts cannot see), named by a hash of everything that goes into it, so it is built once per
change of the sources, pyproject.toml or the pinned dependencies.

`python -m tests.cluster.packaging` builds (or finds) it and prints its path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

PROJECT_DIR = Path(__file__).resolve().parents[2]
VENV_PYTHON = PROJECT_DIR / ".venv" / "bin" / "python"
# What the project's wheel is built from (pyproject.toml's package-dir maps archive/ and connector/).
SOURCE_FILES = ("pyproject.toml", "README.md")
SOURCE_DIRS = ("archive", "connector")
CACHE_DIR_DEFAULT = Path("/var/tmp/aas-packed-env")
ARCHIVE_PREFIX = "aeron-archive-spark-env-"
# Executors get pyspark (and py4j) from $SPARK_HOME/python/lib, never from the packed environment.
EXCLUDED_DEPENDENCIES = frozenset({"pyspark"})
VENV_PACK = "venv-pack==0.2.0"
# Bump when the recipe below changes, so a cached archive of the old recipe is not reused.
RECIPE_VERSION = "1"
BUILD_TIMEOUT_S = 600.0


class PackagingError(RuntimeError):
    """Building the packed environment failed (the message has the failing command's output)."""


def cache_dir() -> Path:
    return Path(os.environ.get("AAS_PACKED_ENV_CACHE") or CACHE_DIR_DEFAULT)


def _run(argv: Sequence[str | Path], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    log.debug("$ %s", " ".join(map(str, argv)))
    result = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        command = " ".join(map(str, argv))
        output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        raise PackagingError(f"{command} failed ({result.returncode}):\n{output}")
    return result.stdout


def base_interpreter(venv_python: Path = VENV_PYTHON) -> Path:
    """The interpreter the project's .venv was created from (`sys.base_prefix`'s python3.X)."""
    script = "import sys; print(sys.base_prefix); print('%d.%d' % sys.version_info[:2])"
    base_prefix, version = _run([venv_python, "-c", script]).split()
    candidate = Path(base_prefix) / "bin" / f"python{version}"
    if not candidate.exists():
        raise PackagingError(f"no base interpreter at {candidate}")
    return candidate


def runtime_requirements(venv_python: Path = VENV_PYTHON) -> list[str]:
    """pyproject.toml's `dependencies` minus pyspark, each pinned to the version the project's .venv has."""
    declared = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["dependencies"]
    names = []
    for requirement in declared:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match is None:
            raise PackagingError(f"cannot parse the requirement {requirement!r}")
        if match.group(1).lower() not in EXCLUDED_DEPENDENCIES:
            names.append((match.group(1), requirement))
    script = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        out[name] = m.version(name)\n"
        "    except m.PackageNotFoundError:\n"
        "        pass\n"
        "print(json.dumps(out))"
    )
    versions = json.loads(_run([venv_python, "-c", script, *(name for name, _ in names)]))
    return [f"{name}=={versions[name]}" if name in versions else requirement for name, requirement in names]


def _source_paths() -> list[Path]:
    paths = [PROJECT_DIR / name for name in SOURCE_FILES if (PROJECT_DIR / name).exists()]
    for directory in SOURCE_DIRS:
        for path in sorted((PROJECT_DIR / directory).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                paths.append(path)
    return paths


def fingerprint(base: Path, requirements: Sequence[str]) -> str:
    """A hash of what goes into the archive: the sources, the interpreter, the pinned dependencies, the recipe."""
    digest = hashlib.sha256()
    for item in (RECIPE_VERSION, str(base), VENV_PACK, *requirements):
        digest.update(item.encode() + b"\0")
    for path in _source_paths():
        digest.update(str(path.relative_to(PROJECT_DIR)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _cache_lock(directory: Path) -> Iterator[None]:
    """One build at a time (two test sessions would otherwise race on the same archive)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _copy_sources(destination: Path) -> None:
    """The files the wheel is built from, without caches: building in the repository would leave build/ there."""
    for name in SOURCE_FILES:
        if (PROJECT_DIR / name).exists():
            shutil.copy2(PROJECT_DIR / name, destination / name)
    for directory in SOURCE_DIRS:
        shutil.copytree(PROJECT_DIR / directory, destination / directory, ignore=shutil.ignore_patterns("__pycache__"))


def _venv_pack(tools: Path, base: Path) -> Path | None:
    """venv-pack in a tool venv of its own (kept in the cache), or None if it cannot be installed."""
    venv_pack = tools / "bin" / "venv-pack"
    if venv_pack.exists():
        return venv_pack
    try:
        shutil.rmtree(tools, ignore_errors=True)
        _run([base, "-m", "venv", tools])
        _run([tools / "bin" / "python", "-m", "pip", "install", "--quiet", VENV_PACK])
    except PackagingError as ex:
        log.warning("venv-pack is not available, packing with tarfile instead: %s", ex)
        shutil.rmtree(tools, ignore_errors=True)
        return None
    return venv_pack


def _tar(env_dir: Path, output: Path) -> None:
    """A plain tar.gz of the venv's contents (symlinks kept: bin/python stays a link to the base interpreter)."""
    with tarfile.open(output, "w:gz", compresslevel=6) as archive:
        for path in sorted(env_dir.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            archive.add(path, arcname=str(path.relative_to(env_dir)), recursive=False)


def build(output: Path, base: Path, requirements: Sequence[str], work: Path, tools: Path) -> None:
    """Build the environment in `work` and pack it to `output`."""
    source = work / "src"
    wheels = work / "wheels"
    env_dir = work / "env"
    source.mkdir()
    _copy_sources(source)
    # The build backend (setuptools, wheel) is in the .venv (the `test` extra): no isolated build env to download.
    _run([VENV_PYTHON, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", wheels, source])
    (wheel,) = wheels.glob("aeron_archive_spark-*.whl")
    # No pip in the packed env: the .venv's pip installs into it (`pip --python`).
    _run([base, "-m", "venv", "--without-pip", env_dir])
    pip: list[str | Path] = [VENV_PYTHON, "-m", "pip", "--python", env_dir / "bin" / "python", "install", "--quiet"]
    _run([*pip, "--no-compile", *requirements])
    _run([*pip, "--no-compile", "--no-deps", wheel])
    # The package must come from the packed env alone: check it there, with pyspark as executors get it.
    spark_python_lib = _spark_python_lib()
    check_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join(str(p) for p in sorted(spark_python_lib.glob("*.zip"))),
    }
    check = (
        "import json, sys, aeron_archive_spark.connector.datasource as d, pyspark_aeron_archive as p\n"
        "print(json.dumps({'prefix': sys.prefix, 'datasource': d.__file__, 'shim': p.__file__}))"
    )
    found = json.loads(_run([env_dir / "bin" / "python", "-c", check], cwd=work, env=check_env))
    for module in ("datasource", "shim"):
        if not found[module].startswith(str(env_dir)):
            raise PackagingError(f"the packed env imports {module} from outside itself: {found}")
    venv_pack = _venv_pack(tools, base)
    if venv_pack is not None:
        _run([venv_pack, "--prefix", env_dir, "--output", output, "--format", "tar.gz", "--quiet"])
    else:
        _tar(env_dir, output)


def _spark_python_lib() -> Path:
    """$SPARK_HOME/python/lib of the .venv's pyspark (pyspark.zip, py4j-*.zip)."""
    script = "import os, pyspark; print(os.path.dirname(pyspark.__file__))"
    return Path(_run([VENV_PYTHON, "-c", script]).strip()) / "python" / "lib"


def packed_env(directory: Path | None = None) -> Path:
    """The packed environment's tar.gz: from the cache if its inputs did not change, else built now."""
    directory = directory or cache_dir()
    base = base_interpreter()
    requirements = runtime_requirements()
    output = directory / f"{ARCHIVE_PREFIX}{fingerprint(base, requirements)}.tar.gz"
    with _cache_lock(directory):
        if output.exists():
            log.info("packed environment (cached): %s", output)
            return output
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="build-", dir=directory) as work:
            partial = Path(work) / output.name
            build(partial, base, requirements, Path(work), directory / "tools")
            partial.chmod(0o644)
            partial.replace(output)
        for stale in directory.glob(f"{ARCHIVE_PREFIX}*.tar.gz"):
            if stale != output:
                stale.unlink(missing_ok=True)
        log.info(
            "packed environment built in %.1fs: %s (%.1f MB; %s)",
            time.monotonic() - started,
            output,
            output.stat().st_size / 1e6,
            ", ".join(requirements),
        )
    return output


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(packed_env())
    return 0


if __name__ == "__main__":
    sys.exit(main())
