"""PySpark data source `format("aeron-archive")` over Aeron Archive recordings."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the data source explicitly (auto-registration covers sessions started after installation)."""
    from aeron_archive_spark.connector.datasource import AeronArchiveDataSource

    spark.dataSource.register(AeronArchiveDataSource)


def __getattr__(name: str) -> Any:
    if name == "AeronArchiveDataSource":
        from aeron_archive_spark.connector.datasource import AeronArchiveDataSource

        return AeronArchiveDataSource
    raise AttributeError(f"module 'aeron_archive_spark.connector' has no attribute {name!r}")


__all__ = ["AeronArchiveDataSource", "register"]
