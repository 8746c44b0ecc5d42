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
    # A fast driver timer makes images go unavailable promptly after their publications close.
    driver = EmbeddedMediaDriver(str(tmp_path_factory.mktemp("aeron") / "driver"),
                                 settings={"AERON_TIMER_INTERVAL": "20ms"})
    yield driver
    driver.close()


@pytest.fixture(scope="session")
def aeron_dir(media_driver) -> str:
    return media_driver.aeron_dir
