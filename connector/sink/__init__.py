"""The aeron-archive Spark sink: exactly-once `writeStream` / `write` into Aeron Archive recordings.

Public reading API for a sink's durable state, which lives in the archive (no Spark needed):

    from aeron_archive_spark.connector.sink import read_batch_map
    read_batch_map(connection_options, checkpoint_location="hdfs://nn/chk/q1")  # -> [BatchEntry(...)]
"""

from __future__ import annotations

from typing import Any

__all__ = ["BatchEntry", "read_batch_map", "read_sink", "read_sinks"]


def __getattr__(name: str) -> Any:
    # Lazy: Spark imports connector.* in its lookup worker, where nothing heavy should load.
    if name == "BatchEntry":
        from aeron_archive_spark.connector.sink import batch_map

        return batch_map.BatchEntry
    if name in ("read_batch_map", "read_sink", "read_sinks"):
        from aeron_archive_spark.connector.sink import log_store

        return getattr(log_store, name)
    raise AttributeError(f"module 'aeron_archive_spark.connector.sink' has no attribute {name!r}")
