"""Fixtures for the Java interop tests: the real Java Aeron 1.15.1 (skipped with the reason if it cannot be had)."""

from __future__ import annotations

import pytest

from interop.javaenv import JavaEnv, JavaUnavailable


@pytest.fixture(scope="session")
def java_env() -> JavaEnv:
    try:
        return JavaEnv.get()
    except JavaUnavailable as ex:
        pytest.skip(f"Java Aeron 1.15.1 unavailable: {ex}")
