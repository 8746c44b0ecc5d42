"""Fixtures for the Java interop tests: the real Java Aeron 1.15.1 and 1.53 (skipped with the reason if they cannot be
had), and for 1.53 Java's archive and ours as processes, each on a UDP control port of its own with 128 KiB segments."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import free_udp_port
from interop.java153env import (
    Java153Env,
    Java153Unavailable,
    JavaArchive,
    OurArchive,
    start_java_archive,
    start_our_archive,
)
from interop.javaenv import JavaEnv, JavaUnavailable


def _or_skip[T](get: Callable[[], T], version: str) -> T:
    """The Java environment `get` finds, or the test skipped with the reason it cannot be had."""
    try:
        return get()
    except (JavaUnavailable, Java153Unavailable) as ex:
        pytest.skip(f"Java Aeron {version} unavailable: {ex}")


@pytest.fixture(scope="session")
def java_env() -> JavaEnv:
    return _or_skip(JavaEnv.get, "1.15.1")


@pytest.fixture(scope="module")
def env() -> Java153Env:
    return _or_skip(Java153Env.get, "1.53")


@pytest.fixture
def java(env: Java153Env, tmp_path: Path) -> Iterator[JavaArchive]:
    archive = start_java_archive(env, tmp_path / "java", free_udp_port(),
                                 "-Daeron.archive.segment.file.length=131072")
    yield archive
    archive.stop()


@pytest.fixture
def ours(tmp_path: Path) -> Iterator[OurArchive]:
    archive = start_our_archive(tmp_path / "ours", tmp_path / "ours" / "archive", free_udp_port(),
                                "--segment-length", "128k")
    yield archive
    archive.stop()
