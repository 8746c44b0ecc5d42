"""`format("aeron-archive")` resolves with no register call (pyspark_* auto-registration)."""

from __future__ import annotations

import pkgutil


def test_shim_is_discoverable_by_spark_lookup():
    assert "pyspark_aeron_archive" in {m.name for m in pkgutil.iter_modules()}
    import pyspark_aeron_archive
    from aeron_archive_spark.connector.datasource import AeronArchiveDataSource
    assert pyspark_aeron_archive.DefaultSource is AeronArchiveDataSource
    assert AeronArchiveDataSource.name() == "aeron-archive"
