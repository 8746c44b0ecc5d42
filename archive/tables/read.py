"""Reading one planned `ReadRange` into Arrow record batches: choose where its bytes come from, then decode.

The last link of the read chain options -> connections -> chunk source -> Arrow, and the one module that knows
both chunk sources: segment files when the range names an archive directory, bounded replays through the running
archive otherwise. The Spark source's executors and the offline `export` both read through here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from aeron_archive_spark.archive.client.pool import ConnectionPool, connection_pool
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.tables.chunks import ChunkSource, DiskChunkSource
from aeron_archive_spark.archive.tables.decode import decode_range
from aeron_archive_spark.archive.tables.payload import PayloadDecoder
from aeron_archive_spark.archive.tables.ranges import ReadRange
from aeron_archive_spark.archive.tables.replay_chunks import ReplayChunkSource


def open_chunk_source(read_range: ReadRange) -> ChunkSource:
    """The disk reader for `archiveDir`, else a bounded replay through the running archive."""
    if read_range.archive_dir is not None:
        return DiskChunkSource()
    return ReplayChunkSource()


def read_batches(read_range: ReadRange, schema: pa.Schema, decoder: PayloadDecoder | None) -> Iterator[pa.RecordBatch]:
    """Record batches (of exactly `schema`) of the messages that begin in `read_range`."""
    yield from decode_range(read_range, open_chunk_source(read_range), schema, decoder)


def current_descriptor(read_range: ReadRange, pool: ConnectionPool | None = None) -> RecordingDescriptor | None:
    """The range's recording as it is now (None once purged or deleted), from where the range reads it.

    Lets a reader that must go on after data loss (failOnDataLoss=false) see a truncation or purge made between
    planning and reading: the catalog, opened read-only, for `archiveDir`; a `ListRecording` on a session leased
    from `pool` (default: the process's `connection_pool()`) for a running archive.
    """
    if read_range.archive_dir is not None:
        with Catalog(read_range.archive_dir, writable=False) as catalog:
            return catalog.find(read_range.recording_id)
    assert read_range.connection is not None
    lease = (pool if pool is not None else connection_pool()).archive(read_range.connection, purpose="replay")
    with lease as archive:
        return archive.list_recording(read_range.recording_id)
