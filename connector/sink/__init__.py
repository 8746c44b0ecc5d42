"""The aeron-archive Spark sink: exactly-once `writeStream` / `write` into Aeron Archive recordings.

Public reading API for a sink's durable state (no Spark or archive needed):

    from aeron_archive_spark.connector.sink import read_batch_map
    read_batch_map("<checkpointLocation>/aeron-archive-sink")  # -> [BatchEntry(batch_id, recording_id, ...)]
"""

from __future__ import annotations

from typing import Any

__all__ = ["BatchEntry", "read_batch_map", "read_sink_state"]


def __getattr__(name: str) -> Any:
    # Lazy: Spark imports connector.* in its lookup worker, where nothing heavy should load.
    if name in ("BatchEntry", "read_batch_map"):
        from aeron_archive_spark.connector.sink import batch_map

        return getattr(batch_map, name)
    if name == "read_sink_state":
        from aeron_archive_spark.connector.sink.state import load_state

        return load_state
    raise AttributeError(f"module 'aeron_archive_spark.connector.sink' has no attribute {name!r}")
