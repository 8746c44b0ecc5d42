"""Reading one planned `ReadRange` into Arrow record batches: choose where its bytes come from, then decode.

The last link of the read chain options -> connections -> chunk source -> Arrow, and the one module that knows
both chunk sources: segment files when the range names an archive directory, bounded replays through the running
archive otherwise. The Spark source's executors and the offline `export` both read through here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

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
