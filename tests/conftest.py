"""Shared fixtures: one embedded media driver per test session, archives in temporary directories."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# Fault injection of the sink's crash tests: set before any Spark session (and so its workers) starts.
os.environ.setdefault("AERON_ARCHIVE_SPARK_FAULT_DIR", tempfile.mkdtemp(prefix="aeron-archive-spark-faults-"))


def pytest_configure(config: pytest.Config) -> None:
    """Stop at once if the installed link tree misses a module of the checkout (one added since the last
    `bash ci/bootstrap.sh`): the strict editable install links files one by one, and the failure would otherwise be
    an ImportError deep inside some test, or inside a Spark worker."""
    from pathlib import Path

    import aeron_archive_spark.archive
    import aeron_archive_spark.connector

    root = Path(__file__).resolve().parents[1]
    for package, source in ((aeron_archive_spark.archive, root / "archive"),
                            (aeron_archive_spark.connector, root / "connector")):
        installed = Path(next(iter(package.__path__)))
        if installed.resolve() == source.resolve():
            continue  # not a link tree (another kind of install): nothing to compare
        missing = sorted(str(path.relative_to(root)) for path in source.rglob("*.py")
                         if "autoregister" not in path.parts and "__pycache__" not in path.parts
                         and not (installed / path.relative_to(source)).exists())
        if missing:
            pytest.exit(f"{', '.join(missing)} not installed in .venv (new since the last bootstrap): "
                        "run `bash ci/bootstrap.sh` (or `bash ci/test.sh`, which runs it first)", returncode=4)


@pytest.fixture(autouse=True)
def _no_armed_faults() -> Iterator[None]:
    """A fault a test armed but that never fired must not fire in a later test."""
    yield
    from aeron_archive_spark.connector.sink import faults

    faults.disarm()


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def media_driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from aeron_archive_spark.archive.native import EmbeddedMediaDriver
    # A fast driver timer makes images go unavailable promptly after their publications close, and a short client
    # liveness timeout (Aeron's default is 10 s) closes what a killed process left (its publications, and so the
    # recordings and sink log leases they held) in 2 s: the crash tests wait for exactly that. A live client's
    # conductor thread sends a keepalive every 500 ms, whatever its process is doing.
    driver = EmbeddedMediaDriver(str(tmp_path_factory.mktemp("aeron") / "driver"),
                                 settings={"AERON_TIMER_INTERVAL": "20ms", "AERON_CLIENT_LIVENESS_TIMEOUT": "2s"})
    yield driver
    driver.close()


@pytest.fixture(scope="session")
def aeron_dir(media_driver) -> str:
    return media_driver.aeron_dir
