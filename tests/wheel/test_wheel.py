"""The built wheel, installed on its own, is the product: one import root, the CLI, Spark registration, the Quickstart.

A non-editable wheel is installed with `--no-deps` into a fresh virtualenv whose dependencies come from the
project's `.venv` (a path entry, so `.venv`'s editable install of this very project is NOT active there), and
everything runs outside the repository, so the source folders `archive/` and `connector/` cannot be imported by
accident. It checks that the distribution claims no generic top-level name, that `format("aeron-archive")`
registers itself, and that the README's Quickstart runs as written against that installation.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from examples.test_readme import run_quickstart

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{' '.join(args)}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n" \
                                 f"{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the checkout's files (never from build/ leftovers in the work tree)."""
    work = tmp_path_factory.mktemp("build")
    files = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT).stdout
    source = work / "source"
    for name in filter(None, files.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    # --no-build-isolation: build with .venv's setuptools (the test extra brings it) instead of downloading one.
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
          "-q", "-w", str(work / "dist"), str(source)], cwd=work)
    [built] = (work / "dist").glob("aeron_archive_spark-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(python, workdir) of a fresh virtualenv holding only the wheel; its dependencies resolve from .venv."""
    work = tmp_path_factory.mktemp("wheel")
    env_dir = work / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=work).stdout.strip())
    # Dependencies from .venv: a plain path entry (the .pth files in that directory, among them the editable
    # install's finder, are not processed for a path added this way).
    (purelib / "deps-from-dot-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
          "--disable-pip-version-check", "-q", str(wheel)], cwd=work)
    return python, work


def test_the_wheel_installs_everything_under_one_import_root(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert top == {"aeron_archive_spark", "pyspark_aeron_archive", "aeron_archive_spark-0.1.0.dist-info"}, top
    # Every package of both trees is in the wheel (a package left out of pyproject.toml would be missing).
    for tree, prefix in (("archive", "aeron_archive_spark/archive"), ("connector", "aeron_archive_spark/connector")):
        for init in (ROOT / tree).rglob("__init__.py"):
            relative = init.relative_to(ROOT / tree).as_posix()
            if relative.startswith("autoregister/"):
                continue
            assert f"{prefix}/{relative}" in names, f"{tree}/{relative} is not in the wheel"
    assert "aeron_archive_spark/archive/codecs/aeron-archive-codecs.xml" in names


def test_installed_outside_the_repository_imports_from_the_wheel_only(installed: tuple[Path, Path]) -> None:
    python, work = installed
    probe = _run([str(python), "-c", """
import importlib.util, json
import aeron_archive_spark.archive, aeron_archive_spark.connector, pyspark_aeron_archive
print(json.dumps({
    "archive": aeron_archive_spark.archive.__file__,
    "connector": aeron_archive_spark.connector.__file__,
    "shim": pyspark_aeron_archive.__file__,
    "bare_archive": importlib.util.find_spec("archive") is not None,
    "bare_connector": importlib.util.find_spec("connector") is not None,
    "source": pyspark_aeron_archive.DefaultSource.name(),
}))
"""], cwd=work).stdout
    found = json.loads(probe)
    env = str(python.parent.parent)
    for key in ("archive", "connector", "shim"):
        assert found[key].startswith(env), f"{key} imported from {found[key]}, not from the wheel in {env}"
    assert not found["bare_archive"] and not found["bare_connector"], found
    assert found["source"] == "aeron-archive"
    # The console script, with the connector's verb found through its entry point.
    out = _run([str(python.parent / "aeron-archive"), "--help"], cwd=work).stdout
    assert "export" in out and "batches" in out


@pytest.mark.spark
def test_the_quickstart_runs_against_the_installed_wheel(installed: tuple[Path, Path], tmp_path: Path) -> None:
    python, _ = installed
    run_quickstart(tmp_path, python=str(python), serve_cwd=tmp_path, aeron_archive=str(python.parent / "aeron-archive"))
